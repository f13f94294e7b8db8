#include "stream/stream.h"

#include <cstring>

namespace tp {

void Gate::open() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    open_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

void Gate::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return open_.load(std::memory_order_acquire); });
}

std::shared_ptr<Stream> Stream::create() {
  std::shared_ptr<Stream> stream(new Stream());
  // The thread owns a reference until it finishes, so a stream dropped with work queued completes it.
  stream->thread_ = std::thread([self = stream] { self->run(); });
  return stream;
}

Stream::~Stream() {
  // Reached only after run() has returned (its reference is gone); the thread may still be unwinding.
  if (thread_.joinable()) {
    if (thread_.get_id() == std::this_thread::get_id()) thread_.detach();
    else thread_.join();
  }
}

uint64_t Stream::enqueue(Task task) {
  uint64_t sequence;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return 0;
    queue_.push_back(std::move(task));
    sequence = enqueued_.fetch_add(1, std::memory_order_acq_rel) + 1;
  }
  cv_.notify_one();
  return sequence;
}

void Stream::watch(const std::weak_ptr<FenceWatcher>& observer) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = observers_.begin(); it != observers_.end();) {  // forget the ones that are gone
    if (it->expired()) it = observers_.erase(it);
    else if (!it->owner_before(observer) && !observer.owner_before(*it)) return;  // already there
    else ++it;
  }
  observers_.push_back(observer);
}

void Stream::waitFor(uint64_t sequence) {
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [&] { return completed() >= sequence; });
}

void Stream::run() {
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return !queue_.empty() || stopping_; });
      if (queue_.empty()) break;  // stopping, and nothing left
      task = std::move(queue_.front());
      queue_.pop_front();
      if (task.kind == Task::Kind::Wait) waitingOn_ = task.gate;
    }
    if (!cancelled_.load(std::memory_order_acquire)) execute(task);
    std::vector<std::weak_ptr<FenceWatcher>> observers;
    {
      std::lock_guard<std::mutex> lock(mu_);
      waitingOn_.reset();
      completed_.fetch_add(1, std::memory_order_acq_rel);
      observers = observers_;
    }
    done_.notify_all();
    task.keep.reset();  // unpin before telling anyone the stream moved on
    for (const auto& weak : observers) {
      if (auto observer = weak.lock()) observer->onProgress(completed());
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  observers_.clear();  // nothing more to report
  finished_.store(true, std::memory_order_release);
}

void Stream::execute(Task& task) {
  switch (task.kind) {
    case Task::Kind::Fill: {
      char* out = static_cast<char*>(task.dst);
      if (task.patternBytes == 1) {
        std::memset(out, static_cast<int>(task.pattern & 0xff), task.bytes);
      } else {
        for (uint64_t i = 0; i + task.patternBytes <= task.bytes; i += task.patternBytes) {
          std::memcpy(out + i, &task.pattern, task.patternBytes);  // little-endian: the low bytes
        }
      }
      break;
    }
    case Task::Kind::Copy:
      std::memmove(task.dst, task.src, task.bytes);
      break;
    case Task::Kind::Axpy: {
      float* y = static_cast<float*>(task.dst);
      const float* x = static_cast<const float*>(task.src);
      for (uint64_t i = 0; i < task.bytes; ++i) y[i] = task.a * x[i] + y[i];
      break;
    }
    case Task::Kind::Wait:
      task.gate->wait();
      break;
  }
}

void Stream::stop(bool cancel) {
  std::shared_ptr<Gate> gate;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    if (cancel) cancelled_.store(true, std::memory_order_release);
    gate = waitingOn_;
  }
  if (cancel && gate) gate->open();  // a task waiting for a promise that may never settle
  cv_.notify_all();
}

void Stream::close(bool cancel) {
  stop(cancel);
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void Stream::closeDetached(bool cancel) {
  stop(cancel);
  // The thread's own reference keeps the stream alive until it has drained; it detaches itself then.
}

bool Stream::closed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stopping_;
}

}  // namespace tp

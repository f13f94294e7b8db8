// Streams (S4): an in-order queue of work run by a thread of its own. Every task gets a sequence number;
// the stream has passed an event once the task it was recorded after has finished, so an event is simply
// (stream, sequence number) and completion is one atomic load.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/fence.h"

namespace tp {

// Opened once, from any thread: a tracked promise settling. A stream task waits on it.
class Gate {
 public:
  void open();
  void wait();
  bool isOpen() const { return open_.load(std::memory_order_acquire); }

 private:
  std::atomic<bool> open_{false};
  std::mutex mu_;
  std::condition_variable cv_;
};

struct Task {
  enum class Kind : uint8_t { Fill, Copy, Axpy, Wait };
  Kind kind = Kind::Fill;
  void* dst = nullptr;          // Fill, Copy: destination; Axpy: y
  const void* src = nullptr;    // Copy: source; Axpy: x
  uint64_t bytes = 0;           // Fill, Copy: bytes; Axpy: elements (floats)
  uint64_t pattern = 0;         // Fill: the element's bit pattern
  uint8_t patternBytes = 1;     // Fill: element size (1, 2, 4 or 8)
  float a = 0;                  // Axpy
  std::shared_ptr<Gate> gate;   // Wait
  std::shared_ptr<void> keep;   // held until the task has run (pins what it touches)
};

class Stream final : public FenceQueue, public std::enable_shared_from_this<Stream> {
 public:
  static std::shared_ptr<Stream> create();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Queues a task; returns its sequence number (1, 2, ...), or 0 when the stream is closed.
  uint64_t enqueue(Task task);
  // The sequence number of the last task queued: an event recorded now is passed when completed() reaches it.
  uint64_t recorded() const override { return enqueued_.load(std::memory_order_acquire); }
  uint64_t completed() const { return completed_.load(std::memory_order_acquire); }
  bool passed(uint64_t sequence) const override { return completed() >= sequence; }
  // Blocks the calling thread until the stream has passed `sequence` (native callers and tests).
  void waitFor(uint64_t sequence);

  // Watchers are told of progress on the stream's thread; held weakly (a watcher that is gone is skipped).
  void watch(const std::weak_ptr<FenceWatcher>& watcher) override;

  // No more work. `cancel`: queued tasks that have not started are dropped (counted as passed, so events
  // after them complete; a task waiting on a gate is released). Then the thread finishes and is joined.
  // Blocks until then; idempotent.
  void close(bool cancel);
  // The same without blocking: the thread finishes on its own (used when the JS object is collected).
  void closeDetached(bool cancel);
  bool closed() const;
  // The thread has run its last task after a close; joining it (close()) no longer waits for work.
  bool finished() const { return finished_.load(std::memory_order_acquire); }

 private:
  Stream() = default;
  void run();
  void execute(Task& task);
  void stop(bool cancel);

  mutable std::mutex mu_;
  std::condition_variable cv_;    // new work, or stop
  std::condition_variable done_;  // progress, for waitFor
  std::deque<Task> queue_;
  std::atomic<uint64_t> enqueued_{0};
  std::atomic<uint64_t> completed_{0};
  bool stopping_ = false;
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> finished_{false};
  std::shared_ptr<Gate> waitingOn_;  // the gate the running task waits on
  std::vector<std::weak_ptr<FenceWatcher>> observers_;
  std::thread thread_;
};

}  // namespace tp

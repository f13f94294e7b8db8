#include "stream_object.h"

#include <atomic>
#include <mutex>

#include "core/pool.h"
#include "addon.h"
#include "args.h"

namespace tp::napi {

// Tells JS (through a thread-safe function) when the stream reaches the sequence number JS watches for.
// While something is watched the function keeps the event loop alive; otherwise it does not.
class StreamObject::Notifier : public FenceWatcher {
 public:
  Notifier(Napi::Env env, Napi::Function onProgress) : alive_(std::make_shared<Alive>()) {
    // Node finalizes the function itself when the environment shuts down; after that it must be neither
    // called nor released. The flag, guarded so that a call in flight finishes before the finalizer does,
    // outlives us: the finalizer owns a reference to it.
    tsfn_ = Napi::ThreadSafeFunction::New(env, onProgress, "tensorpool stream", 0, 1,
                                          [](Napi::Env, std::shared_ptr<Alive>* alive) {
                                            {
                                              std::lock_guard<std::mutex> lock((*alive)->mu);
                                              (*alive)->yes = false;
                                            }
                                            delete alive;
                                          },
                                          new std::shared_ptr<Alive>(alive_));
    tsfn_.Unref(env);
  }
  ~Notifier() override {
    std::lock_guard<std::mutex> lock(alive_->mu);
    if (alive_->yes) tsfn_.Release();
  }

  void watch(Napi::Env env, uint64_t sequence) {
    std::lock_guard<std::mutex> lock(alive_->mu);
    if (!alive_->yes) return;
    watched_.store(sequence, std::memory_order_release);
    if (sequence == UINT64_MAX) tsfn_.Unref(env);
    else tsfn_.Ref(env);
  }

  void onProgress(uint64_t completed) override {
    uint64_t watched = watched_.load(std::memory_order_acquire);
    if (completed < watched || !watched_.compare_exchange_strong(watched, UINT64_MAX)) return;
    std::lock_guard<std::mutex> lock(alive_->mu);
    if (!alive_->yes) return;
    tsfn_.NonBlockingCall([completed](Napi::Env env, Napi::Function callback) {
      // Plain N-API: while the environment goes, these fail by status; a C++ exception would terminate.
      napi_value receiver, argument, result;
      if (napi_get_undefined(env, &receiver) != napi_ok) return;
      if (napi_create_double(env, static_cast<double>(completed), &argument) != napi_ok) return;
      napi_call_function(env, receiver, callback, 1, &argument, &result);
    });
  }

 private:
  struct Alive {
    std::mutex mu;
    bool yes = true;
  };
  std::shared_ptr<Alive> alive_;
  Napi::ThreadSafeFunction tsfn_;
  std::atomic<uint64_t> watched_{UINT64_MAX};
};

namespace {

// A range of a live pool block, checked; *pin keeps the pool's memory mapped until the task has run.
char* poolRange(const Napi::CallbackInfo& info, size_t bufferArg, uint64_t offset, uint64_t length, const char* name,
                std::shared_ptr<void>* pin) {
  Napi::Env env = info.Env();
  Napi::ArrayBuffer buffer = requireArrayBufferArg(info, bufferArg, name);
  if (buffer.IsDetached()) throw errorWithCode(env, "ERR_TP_DOUBLE_RELEASE", std::string(name) + " was already released");
  uint64_t bytes = 0;
  std::shared_ptr<Pool> pool = Pool::owning(buffer.Data(), &bytes);
  if (!pool) {
    throw errorWithCode(env, "ERR_TP_FOREIGN_BUFFER", std::string(name) + ": stream tasks take buffers made by a tensorpool Pool");
  }
  if (offset > bytes || length > bytes - offset) {
    throw Napi::RangeError::New(env, std::string(name) + ": the range is outside its block");
  }
  *pin = pool->pin();
  return static_cast<char*>(buffer.Data()) + offset;
}

std::shared_ptr<void> bothPins(std::shared_ptr<void> a, std::shared_ptr<void> b) {
  return std::make_shared<std::pair<std::shared_ptr<void>, std::shared_ptr<void>>>(std::move(a), std::move(b));
}

}  // namespace

Napi::Function StreamObject::Define(Napi::Env env) {
  return DefineClass(env, "NativeStream",
                     {
                         InstanceMethod<&StreamObject::Fill>("fill"),
                         InstanceMethod<&StreamObject::Copy>("copy"),
                         InstanceMethod<&StreamObject::Axpy>("axpy"),
                         InstanceMethod<&StreamObject::WaitGate>("waitGate"),
                         InstanceMethod<&StreamObject::OpenGate>("openGate"),
                         InstanceMethod<&StreamObject::Recorded>("recorded"),
                         InstanceMethod<&StreamObject::Completed>("completed"),
                         InstanceMethod<&StreamObject::Watch>("watch"),
                         InstanceMethod<&StreamObject::Close>("close"),
                     });
}

StreamObject::StreamObject(const Napi::CallbackInfo& info) : Napi::ObjectWrap<StreamObject>(info) {
  if (!info[0].IsFunction()) throw Napi::TypeError::New(info.Env(), "onProgress must be a function");
  stream_ = Stream::create();
  notifier_ = std::make_shared<Notifier>(info.Env(), info[0].As<Napi::Function>());
  stream_->watch(notifier_);
  info.Env().GetInstanceData<Addon>()->adoptStream(stream_);
}

// Collected: queued work still runs (its memory stays pinned); waits on promises nobody can settle for us
// any more are released; then the stream's thread ends.
StreamObject::~StreamObject() {
  for (auto& [id, gate] : gates_) gate->open();
  stream_->closeDetached(false);
}

StreamObject* StreamObject::From(const Napi::Value& value) {
  if (!value.IsObject()) return nullptr;
  Addon* addon = value.Env().GetInstanceData<Addon>();
  if (!addon || !value.As<Napi::Object>().InstanceOf(addon->streamConstructor.Value())) return nullptr;
  return Unwrap(value.As<Napi::Object>());
}

uint64_t StreamObject::enqueue(Napi::Env env, Task task) {
  const uint64_t sequence = stream_->enqueue(std::move(task));
  if (sequence == 0) throw errorWithCode(env, "ERR_TP_CLOSED", "the stream is closed");
  return sequence;
}

Napi::Value StreamObject::Fill(const Napi::CallbackInfo& info) {
  Task task;
  task.kind = Task::Kind::Fill;
  const uint64_t offset = requireUintArg(info, 1, "byteOffset"), length = requireUintArg(info, 2, "byteLength");
  task.dst = poolRange(info, 0, offset, length, "view", &task.keep);
  task.bytes = length;
  task.pattern = requireUintArg(info, 3, "patternLow") | (requireUintArg(info, 4, "patternHigh") << 32);
  task.patternBytes = static_cast<uint8_t>(requireUintArg(info, 5, "patternBytes"));
  if (task.patternBytes != 1 && task.patternBytes != 2 && task.patternBytes != 4 && task.patternBytes != 8) {
    throw Napi::RangeError::New(info.Env(), "patternBytes must be 1, 2, 4 or 8");
  }
  return Napi::Number::New(info.Env(), static_cast<double>(enqueue(info.Env(), std::move(task))));
}

Napi::Value StreamObject::Copy(const Napi::CallbackInfo& info) {
  Task task;
  task.kind = Task::Kind::Copy;
  const uint64_t bytes = requireUintArg(info, 4, "bytes");
  std::shared_ptr<void> dstPin, srcPin;
  task.dst = poolRange(info, 0, requireUintArg(info, 1, "dstOffset"), bytes, "dst", &dstPin);
  task.src = poolRange(info, 2, requireUintArg(info, 3, "srcOffset"), bytes, "src", &srcPin);
  task.bytes = bytes;
  task.keep = bothPins(std::move(dstPin), std::move(srcPin));
  return Napi::Number::New(info.Env(), static_cast<double>(enqueue(info.Env(), std::move(task))));
}

Napi::Value StreamObject::Axpy(const Napi::CallbackInfo& info) {
  Task task;
  task.kind = Task::Kind::Axpy;
  if (!info[0].IsNumber()) throw Napi::TypeError::New(info.Env(), "a must be a number");
  task.a = info[0].As<Napi::Number>().FloatValue();
  const uint64_t count = requireUintArg(info, 5, "count");
  if (count > (uint64_t{1} << 60)) throw Napi::RangeError::New(info.Env(), "count is too large");
  std::shared_ptr<void> xPin, yPin;
  const uint64_t xOffset = requireUintArg(info, 2, "xOffset"), yOffset = requireUintArg(info, 4, "yOffset");
  if (xOffset % 4 || yOffset % 4) throw Napi::RangeError::New(info.Env(), "Float32 views start at multiples of 4");
  task.src = poolRange(info, 1, xOffset, count * 4, "x", &xPin);
  task.dst = poolRange(info, 3, yOffset, count * 4, "y", &yPin);
  task.bytes = count;
  task.keep = bothPins(std::move(xPin), std::move(yPin));
  return Napi::Number::New(info.Env(), static_cast<double>(enqueue(info.Env(), std::move(task))));
}

Napi::Value StreamObject::WaitGate(const Napi::CallbackInfo& info) {
  Task task;
  task.kind = Task::Kind::Wait;
  task.gate = std::make_shared<Gate>();
  const uint32_t id = nextGate_++;
  gates_[id] = task.gate;
  const uint64_t sequence = enqueue(info.Env(), std::move(task));
  Napi::Array out = Napi::Array::New(info.Env(), 2);
  out.Set(0u, Napi::Number::New(info.Env(), static_cast<double>(sequence)));
  out.Set(1u, Napi::Number::New(info.Env(), id));
  return out;
}

Napi::Value StreamObject::OpenGate(const Napi::CallbackInfo& info) {
  const auto id = static_cast<uint32_t>(requireUintArg(info, 0, "gate"));
  auto it = gates_.find(id);
  if (it != gates_.end()) {
    it->second->open();
    gates_.erase(it);
  }
  return info.Env().Undefined();
}

Napi::Value StreamObject::Recorded(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), static_cast<double>(stream_->recorded()));
}

Napi::Value StreamObject::Completed(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), static_cast<double>(stream_->completed()));
}

Napi::Value StreamObject::Watch(const Napi::CallbackInfo& info) {
  const uint64_t sequence = requireUintArg(info, 0, "sequence");
  notifier_->watch(info.Env(), sequence == 0 ? UINT64_MAX : sequence);
  // Reached already (possibly before the watch was set): report now, from the event loop.
  if (sequence != 0 && stream_->completed() >= sequence) notifier_->onProgress(stream_->completed());
  return info.Env().Undefined();
}

Napi::Value StreamObject::Close(const Napi::CallbackInfo& info) {
  const bool cancel = info[0].IsBoolean() && info[0].As<Napi::Boolean>().Value();
  // Cancel first, then open: a gate opened before the stream knows it is cancelled lets the task queued
  // behind the wait run.
  stream_->closeDetached(cancel);
  if (cancel) {
    for (auto& [id, gate] : gates_) gate->open();
    gates_.clear();
  }
  return info.Env().Undefined();
}

}  // namespace tp::napi

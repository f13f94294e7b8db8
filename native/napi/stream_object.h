// JS class wrapping tp::Stream. Tasks take pool buffers only (validated and bounds-checked here) and pin
// their pools while queued; progress reaches JS through a thread-safe function.
#pragma once

#include <napi.h>

#include <map>
#include <memory>

#include "stream/stream.h"

namespace tp::napi {

class StreamObject : public Napi::ObjectWrap<StreamObject> {
 public:
  static Napi::Function Define(Napi::Env env);
  // new NativeStream(onProgress: (completed: number) => void)
  explicit StreamObject(const Napi::CallbackInfo& info);
  ~StreamObject() override;

  static StreamObject* From(const Napi::Value& value);
  const std::shared_ptr<Stream>& stream() const { return stream_; }

 private:
  // Each returns the task's sequence number.
  Napi::Value Fill(const Napi::CallbackInfo& info);   // (buffer, byteOffset, byteLength, patternLow, patternHigh, patternBytes)
  Napi::Value Copy(const Napi::CallbackInfo& info);   // (dst, dstOffset, src, srcOffset, bytes)
  Napi::Value Axpy(const Napi::CallbackInfo& info);   // (a, x, xOffset, y, yOffset, count)
  Napi::Value WaitGate(const Napi::CallbackInfo& info);  // () -> [sequence, gate id]: work after it waits
  Napi::Value OpenGate(const Napi::CallbackInfo& info);  // (gate id)
  Napi::Value Recorded(const Napi::CallbackInfo& info);
  Napi::Value Completed(const Napi::CallbackInfo& info);
  Napi::Value Watch(const Napi::CallbackInfo& info);     // (sequence): report progress once it is reached
  Napi::Value Close(const Napi::CallbackInfo& info);     // (cancel): no more work; never blocks

  uint64_t enqueue(Napi::Env env, Task task);

  class Notifier;
  std::shared_ptr<Stream> stream_;
  std::shared_ptr<Notifier> notifier_;
  std::map<uint32_t, std::shared_ptr<Gate>> gates_;
  uint32_t nextGate_ = 1;
};

}  // namespace tp::napi

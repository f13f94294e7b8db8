// The addon's entry point: registers the JS classes and functions. State lives in per-environment instance
// data (Napi::Addon), so the addon loads in worker threads as well as on the main thread.
#include "addon.h"

#include "os/os.h"
#include "args.h"
#include "exec.h"
#include "preload_options.h"
#include "fault_meter_object.h"
#include "onnxruntime.h"
#include "planning.h"
#include "pool_object.h"
#include "process_pool_object.h"
#include "replayer_object.h"
#include "stream_object.h"

namespace tp::napi {

Addon::Addon(Napi::Env env, Napi::Object exports) {
  Napi::Function pool = PoolObject::Define(env);
  poolConstructor = Napi::Persistent(pool);
  Napi::Function stream = StreamObject::Define(env);
  streamConstructor = Napi::Persistent(stream);
  DefineAddon(exports, {
                           InstanceValue("NativePool", pool),
                           InstanceValue("NativeFaultMeter", FaultMeterObject::Define(env)),
                           InstanceValue("NativeReplayer", ReplayerObject::Define(env)),
                           InstanceValue("NativeStream", stream),
                           InstanceValue("NativeProcessPool", ProcessPoolObject::Define(env)),
                           InstanceValue("processPoolInfo", Napi::Function::New(env, ProcessPoolObject::Info)),
                           InstanceValue("leaveProcessPool", Napi::Function::New(env, ProcessPoolObject::LeaveThread)),
                           InstanceValue("registerOrtAllocator", Napi::Function::New(env, RegisterOrtAllocator)),
                           InstanceValue("unregisterOrtAllocator", Napi::Function::New(env, UnregisterOrtAllocator)),
                           InstanceValue("ortAllocatorCounters", Napi::Function::New(env, OrtAllocatorCounters)),
                           InstanceMethod<&Addon::ProcessFaults>("processFaults"),
                           InstanceMethod<&Addon::Memory>("memory"),
                           InstanceMethod<&Addon::BufferAddress>("bufferAddress"),
                           InstanceMethod<&Addon::FreeBuffer>("freeBuffer"),
                           InstanceValue("trainSizeClasses", Napi::Function::New(env, TrainSizeClasses)),
                           InstanceValue("trainTimeShared", Napi::Function::New(env, TrainTimeShared)),
                           InstanceValue("planOffsets", Napi::Function::New(env, PlanOffsets)),
                           InstanceValue("verifyOffsets", Napi::Function::New(env, VerifyOffsets)),
                           InstanceValue("execProgram", Napi::Function::New(env, ExecProgram)),
                           InstanceValue("preloadOptions", Napi::Function::New(env, PreloadOptions)),
                           InstanceValue("checkPreloadOption", Napi::Function::New(env, CheckPreloadOption)),
                           InstanceValue("pageSize", Napi::Number::New(env, static_cast<double>(os::pageSize()))),
                       });
}

Addon::~Addon() {
  for (const std::shared_ptr<Stream>& stream : streams_) stream->close(true);
}

void Addon::adoptStream(std::shared_ptr<Stream> stream) {
  // Forget the streams that are done: closed, drained, and held by nobody else (their thread has let go).
  for (auto it = streams_.begin(); it != streams_.end();) {
    if ((*it)->finished() && it->use_count() == 1) {
      (*it)->close(false);  // joins a thread that has nothing left to do
      it = streams_.erase(it);
    } else {
      ++it;
    }
  }
  streams_.push_back(std::move(stream));
}

// -> { minor, major } for the whole process (getrusage).
Napi::Value Addon::ProcessFaults(const Napi::CallbackInfo& info) {
  return faultCountsObject(info.Env(), os::processFaults());
}

// -> { rss, peakRss, cHeapInUse, cHeapFree } in bytes; with `true`, the peak is reset to the current RSS first.
Napi::Value Addon::Memory(const Napi::CallbackInfo& info) {
  if (info[0].IsBoolean() && info[0].As<Napi::Boolean>().Value()) os::resetPeakResident();
  Napi::Object o = Napi::Object::New(info.Env());
  o.Set("rss", Napi::Number::New(info.Env(), static_cast<double>(os::residentBytes())));
  o.Set("peakRss", Napi::Number::New(info.Env(), static_cast<double>(os::peakResidentBytes())));
  const os::CHeapBytes heap = os::cHeapBytes();
  o.Set("cHeapInUse", Napi::Number::New(info.Env(), static_cast<double>(heap.inUse)));
  o.Set("cHeapFree", Napi::Number::New(info.Env(), static_cast<double>(heap.free)));
  return o;
}

// -> the address an ArrayBuffer's data starts at (introspection for tests: proves blocks never overlap).
Napi::Value Addon::BufferAddress(const Napi::CallbackInfo& info) {
  Napi::ArrayBuffer buffer = requireArrayBufferArg(info, 0, "buffer");
  return Napi::Number::New(info.Env(), static_cast<double>(reinterpret_cast<uintptr_t>(buffer.Data())));
}

// (buffer) -> whether it was detached. Detaching drops V8's reference to the backing store, so memory no
// other handle shares goes back to its allocator now instead of at a garbage collection. false for a
// buffer that cannot be detached (napi_detachable_arraybuffer_expected); nothing is thrown for that.
Napi::Value Addon::FreeBuffer(const Napi::CallbackInfo& info) {
  Napi::ArrayBuffer buffer = requireArrayBufferArg(info, 0, "buffer");
  return Napi::Boolean::New(info.Env(), napi_detach_arraybuffer(info.Env(), buffer) == napi_ok);
}

}  // namespace tp::napi

// The macro pastes the name into an identifier, so it takes an unqualified one.
using TensorPoolAddon = tp::napi::Addon;
NODE_API_ADDON(TensorPoolAddon)

// JS class over the process pool of the preload library (native/preload), when this process preloads it:
// its counters, iteration marks, recording and plan switches, through the library's function table
// (process_api.h) — never through this addon's own copy of the core.
#pragma once

#include <napi.h>

#include "preload/process_api.h"

namespace tp::napi {

class ProcessPoolObject : public Napi::ObjectWrap<ProcessPoolObject> {
 public:
  static Napi::Function Define(Napi::Env env);
  // new NativeProcessPool(): throws ERR_TP_NO_PROCESS_POOL when the library is not preloaded, and
  // ERR_TP_PRELOAD_MISMATCH when it comes from another build than this addon.
  explicit ProcessPoolObject(const Napi::CallbackInfo& info);

  // The library's table, checked against this build; nullptr when the library is not preloaded. Throws
  // ERR_TP_PRELOAD_MISMATCH on a mismatch.
  static const preload::ProcessPoolApi* find(Napi::Env env);
  // -> { mode, minBytes, build, planPath, recordPath } or null (addon function processPoolInfo()).
  static Napi::Value Info(const Napi::CallbackInfo& info);
  // The calling thread's allocations go to the C library from now on (addon function leaveProcessPool());
  // true when a process pool is preloaded, false (nothing done) otherwise.
  static Napi::Value LeaveThread(const Napi::CallbackInfo& info);

 private:
  Napi::Value Stats(const Napi::CallbackInfo& info);
  Napi::Value ClassStats(const Napi::CallbackInfo& info);
  Napi::Value MarkIteration(const Napi::CallbackInfo& info);
  Napi::Value SwitchPlan(const Napi::CallbackInfo& info);
  Napi::Value PrepareSwitch(const Napi::CallbackInfo& info);
  Napi::Value StartRecording(const Napi::CallbackInfo& info);
  Napi::Value StopRecording(const Napi::CallbackInfo& info);
  Napi::Value RecordingState(const Napi::CallbackInfo& info);
  Napi::Value CopyRecording(const Napi::CallbackInfo& info);
  Napi::Value DiscardRecording(const Napi::CallbackInfo& info);
  Napi::Value Trim(const Napi::CallbackInfo& info);

  const preload::ProcessPoolApi* api_;
};

}  // namespace tp::napi

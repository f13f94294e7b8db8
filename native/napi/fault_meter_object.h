// JS class wrapping tp::FaultMeter: page faults of the thread that created it.
#pragma once

#include <napi.h>

#include "os/faults.h"

namespace tp::napi {

class FaultMeterObject : public Napi::ObjectWrap<FaultMeterObject> {
 public:
  static Napi::Function Define(Napi::Env env);
  explicit FaultMeterObject(const Napi::CallbackInfo& info);

 private:
  Napi::Value Read(const Napi::CallbackInfo& info);    // -> { minor, major }
  Napi::Value Source(const Napi::CallbackInfo& info);  // -> 'perf_event' | 'getrusage'

  FaultMeter meter_;
};

// { minor, major } as a JS object.
Napi::Object faultCountsObject(Napi::Env env, const os::FaultCounts& counts);

}  // namespace tp::napi

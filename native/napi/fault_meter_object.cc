#include "fault_meter_object.h"

#include "args.h"

namespace tp::napi {

Napi::Object faultCountsObject(Napi::Env env, const os::FaultCounts& counts) {
  Napi::Object o = Napi::Object::New(env);
  setNumber(o, "minor", counts.minor);
  setNumber(o, "major", counts.major);
  return o;
}

Napi::Function FaultMeterObject::Define(Napi::Env env) {
  return DefineClass(env, "NativeFaultMeter",
                     {
                         InstanceMethod<&FaultMeterObject::Read>("read"),
                         InstanceAccessor<&FaultMeterObject::Source>("source"),
                     });
}

FaultMeterObject::FaultMeterObject(const Napi::CallbackInfo& info) : Napi::ObjectWrap<FaultMeterObject>(info) {}

Napi::Value FaultMeterObject::Read(const Napi::CallbackInfo& info) {
  return faultCountsObject(info.Env(), meter_.read());
}

Napi::Value FaultMeterObject::Source(const Napi::CallbackInfo& info) {
  return Napi::String::New(info.Env(), meter_.source() == FaultSource::PerfEvent ? "perf_event" : "getrusage");
}

}  // namespace tp::napi

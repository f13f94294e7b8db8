#include "onnxruntime.h"

#include <string>

#include "onnxruntime/ort_allocator.h"
#include "args.h"
#include "pool_object.h"

namespace tp::napi {

Napi::Value RegisterOrtAllocator(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsString()) throw Napi::TypeError::New(env, "libraryPath must be a string");
  PoolObject* pool = PoolObject::From(info[1]);
  if (!pool) throw Napi::TypeError::New(env, "pool must be a NativePool");
  std::string version, error;
  if (!ort::registerAllocator(info[0].As<Napi::String>().Utf8Value().c_str(), pool->pool(), &version, &error)) {
    throw errorWithCode(env, "ERR_TP_ONNXRUNTIME", error);
  }
  return Napi::String::New(env, version);
}

Napi::Value UnregisterOrtAllocator(const Napi::CallbackInfo& info) {
  std::string error;
  if (!ort::unregisterAllocator(&error)) throw errorWithCode(info.Env(), "ERR_TP_ONNXRUNTIME", error);
  return info.Env().Undefined();
}

Napi::Value OrtAllocatorCounters(const Napi::CallbackInfo& info) {
  const ort::AllocatorCounters c = ort::allocatorCounters();
  Napi::Object o = Napi::Object::New(info.Env());
  setNumber(o, "allocs", c.allocs);
  setNumber(o, "frees", c.frees);
  setNumber(o, "heapFallbacks", c.heapFallbacks);
  return o;
}

}  // namespace tp::napi

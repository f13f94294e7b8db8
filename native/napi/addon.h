// The addon's per-environment state (instance data): one per main thread or worker thread.
#pragma once

#include <napi.h>

namespace tp::napi {

class Addon : public Napi::Addon<Addon> {
 public:
  Addon(Napi::Env env, Napi::Object exports);

  // The NativePool class of this environment, to recognise its instances.
  Napi::FunctionReference poolConstructor;

 private:
  Napi::Value ProcessFaults(const Napi::CallbackInfo& info);
  Napi::Value Memory(const Napi::CallbackInfo& info);
  Napi::Value BufferAddress(const Napi::CallbackInfo& info);
};

}  // namespace tp::napi

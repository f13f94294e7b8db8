// The addon's per-environment state (instance data): one per main thread or worker thread.
#pragma once

#include <napi.h>

namespace tp::napi {

class Addon : public Napi::Addon<Addon> {
 public:
  Addon(Napi::Env env, Napi::Object exports);

  // The classes of this environment, to recognise their instances.
  Napi::FunctionReference poolConstructor;
  Napi::FunctionReference streamConstructor;

 private:
  Napi::Value ProcessFaults(const Napi::CallbackInfo& info);
  Napi::Value Memory(const Napi::CallbackInfo& info);
  Napi::Value BufferAddress(const Napi::CallbackInfo& info);
};

}  // namespace tp::napi

// The addon's per-environment state (instance data): one per main thread or worker thread.
#pragma once

#include <napi.h>

#include <memory>
#include <vector>

#include "stream/stream.h"

namespace tp::napi {

class Addon : public Napi::Addon<Addon> {
 public:
  Addon(Napi::Env env, Napi::Object exports);
  // The environment is going (a worker_thread ends, or the process exits): every stream of this
  // environment is closed, its queued work cancelled, and its thread joined, so no thread runs this
  // library's code once Node unloads it with the environment.
  ~Addon();

  // Keeps a stream of this environment until its thread has finished (a stream whose JS object was
  // collected drains on its own) or the environment goes.
  void adoptStream(std::shared_ptr<Stream> stream);

  // The classes of this environment, to recognise their instances.
  Napi::FunctionReference poolConstructor;
  Napi::FunctionReference streamConstructor;

 private:
  Napi::Value ProcessFaults(const Napi::CallbackInfo& info);
  Napi::Value Memory(const Napi::CallbackInfo& info);
  Napi::Value BufferAddress(const Napi::CallbackInfo& info);
  Napi::Value FreeBuffer(const Napi::CallbackInfo& info);

  std::vector<std::shared_ptr<Stream>> streams_;
};

}  // namespace tp::napi

// Work for a libuv worker thread, in plain N-API: `execute` runs there, then `settle(env)` on the JS thread.
// Plain N-API calls report failure by status instead of throwing, so nothing can escape into the event
// loop: a worker_thread that exits with work in flight tears its environment down under us, and a C++
// exception there would terminate the process. When the work is cancelled (the environment is going),
// `settle` does not run.
#pragma once

#include <napi.h>

#include <string>
#include <utility>

namespace tp::napi {

template <typename Execute, typename Settle>
void queueWork(Napi::Env env, const char* name, Execute execute, Settle settle) {
  struct Work {
    Execute execute;
    Settle settle;
    napi_async_work handle = nullptr;
  };
  auto* work = new Work{std::move(execute), std::move(settle)};
  napi_value resourceName;
  napi_status status = napi_create_string_utf8(env, name, NAPI_AUTO_LENGTH, &resourceName);
  if (status == napi_ok) {
    status = napi_create_async_work(
        env, nullptr, resourceName, [](napi_env, void* data) { static_cast<Work*>(data)->execute(); },
        [](napi_env completeEnv, napi_status workStatus, void* data) {
          Work* done = static_cast<Work*>(data);
          if (workStatus == napi_ok) done->settle(completeEnv);
          napi_delete_async_work(completeEnv, done->handle);
          delete done;
        },
        work, &work->handle);
  }
  if (status == napi_ok) status = napi_queue_async_work(env, work->handle);
  if (status != napi_ok) {
    if (work->handle) napi_delete_async_work(env, work->handle);
    delete work;
    throw Napi::Error::New(env, "could not queue work on a libuv thread");
  }
}

// Settles `deferred` with a number, or (when `error` is not empty) rejects it with an Error whose `code`
// is `code`. Failures are ignored: the environment may be going away.
inline void settleDeferred(napi_env env, napi_deferred deferred, double value, const char* code, const std::string& error) {
  napi_value result;
  if (error.empty()) {
    if (napi_create_double(env, value, &result) == napi_ok) napi_resolve_deferred(env, deferred, result);
    return;
  }
  napi_value codeValue, message;
  if (napi_create_string_utf8(env, code, NAPI_AUTO_LENGTH, &codeValue) == napi_ok &&
      napi_create_string_utf8(env, error.c_str(), error.size(), &message) == napi_ok &&
      napi_create_error(env, codeValue, message, &result) == napi_ok) {
    napi_reject_deferred(env, deferred, result);
  }
}

}  // namespace tp::napi

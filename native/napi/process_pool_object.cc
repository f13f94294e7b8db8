#include "process_pool_object.h"

#include <dlfcn.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "args.h"
#include "async_work.h"
#include "pool_values.h"

#ifndef TP_PACKAGE_VERSION
#define TP_PACKAGE_VERSION "unknown"
#endif

namespace tp::napi {

namespace {

// Calls one of the library's switch entries with `plan` as a PlanView; its result (0 on failure, with the
// library's message in *error).
template <typename Entry>
uint64_t switchWith(Entry entry, const PlanSpec& plan, std::string* error) {
  const preload::PlanView view{plan.interval,
                               plan.classes.data(),         plan.classes.size(),
                               plan.schedule.data(),        plan.schedule.size(),
                               plan.iterationStarts.data(), plan.iterationStarts.size(), plan.cycle,
                               plan.layout.data(),          plan.layout.size()};
  char message[512] = "";
  const uint64_t result = static_cast<uint64_t>(entry(&view, message, sizeof message));
  if (!result) *error = message;
  return result;
}

}  // namespace

const preload::ProcessPoolApi* ProcessPoolObject::find(Napi::Env env) {
  using Finder = const preload::ProcessPoolApi* (*)();
  auto finder = reinterpret_cast<Finder>(dlsym(RTLD_DEFAULT, "tensorpool_process_pool"));
  const preload::ProcessPoolApi* api = finder ? finder() : nullptr;
  if (!api) return nullptr;
  if (api->version != preload::kProcessApiVersion || api->layout != preload::processApiLayout() ||
      std::string(api->build) != TP_PACKAGE_VERSION) {
    throw errorWithCode(env, "ERR_TP_PRELOAD_MISMATCH",
                        std::string("the preloaded tensorpool library is from build ") + api->build + " (interface " +
                            std::to_string(api->version) + "), this addon from " + TP_PACKAGE_VERSION + " (interface " +
                            std::to_string(preload::kProcessApiVersion) +
                            "): preload the library of the same package (its path is tensorpool's preloadLibrary)");
  }
  return api;
}

Napi::Value ProcessPoolObject::Info(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const preload::ProcessPoolApi* api = find(env);
  if (!api) return env.Null();
  Napi::Object o = Napi::Object::New(env);
  o.Set("mode", Napi::String::New(env, api->mode));
  setNumber(o, "minBytes", api->minBytes);
  o.Set("build", Napi::String::New(env, api->build));
  o.Set("planPath", api->planPath ? Napi::Value(Napi::String::New(env, api->planPath)) : env.Null());
  o.Set("recordPath", api->recordPath ? Napi::Value(Napi::String::New(env, api->recordPath)) : env.Null());
  return o;
}

Napi::Value ProcessPoolObject::LeaveThread(const Napi::CallbackInfo& info) {
  const preload::ProcessPoolApi* api = find(info.Env());
  if (api) api->leaveThread();
  return Napi::Boolean::New(info.Env(), api != nullptr);
}

Napi::Function ProcessPoolObject::Define(Napi::Env env) {
  return DefineClass(env, "NativeProcessPool",
                     {
                         InstanceMethod<&ProcessPoolObject::Stats>("stats"),
                         InstanceMethod<&ProcessPoolObject::ClassStats>("classStats"),
                         InstanceMethod<&ProcessPoolObject::MarkIteration>("markIteration"),
                         InstanceMethod<&ProcessPoolObject::SwitchPlan>("switchPlan"),
                         InstanceMethod<&ProcessPoolObject::PrepareSwitch>("prepareSwitch"),
                         InstanceMethod<&ProcessPoolObject::StartRecording>("startRecording"),
                         InstanceMethod<&ProcessPoolObject::StopRecording>("stopRecording"),
                         InstanceMethod<&ProcessPoolObject::RecordingState>("recordingState"),
                         InstanceMethod<&ProcessPoolObject::CopyRecording>("copyRecording"),
                         InstanceMethod<&ProcessPoolObject::DiscardRecording>("discardRecording"),
                         InstanceMethod<&ProcessPoolObject::Trim>("trim"),
                     });
}

ProcessPoolObject::ProcessPoolObject(const Napi::CallbackInfo& info)
    : Napi::ObjectWrap<ProcessPoolObject>(info), api_(find(info.Env())) {
  if (!api_) {
    throw errorWithCode(info.Env(), "ERR_TP_NO_PROCESS_POOL",
                        "this process does not preload the tensorpool library (run it with `tensorpool run`)");
  }
}

Napi::Value ProcessPoolObject::Stats(const Napi::CallbackInfo& info) {
  PoolStats stats{};
  api_->stats(&stats);
  return statsObject(info.Env(), stats);
}

Napi::Value ProcessPoolObject::ClassStats(const Napi::CallbackInfo& info) {
  std::vector<tp::ClassStats> classes(api_->classStats(nullptr, 0));
  classes.resize(std::min(classes.size(), api_->classStats(classes.data(), classes.size())));
  return classStatsObject(info.Env(), classes, api_->interval());
}

Napi::Value ProcessPoolObject::MarkIteration(const Napi::CallbackInfo& info) {
  IterationSummary ended{};
  api_->markIteration(&ended);
  if (ended.installed) {
    queueWork(info.Env(), "tensorpool.discardRetired", [api = api_] { api->discardRetired(); }, [](napi_env) {});
  }
  return summaryIfWanted(info, ended);
}

Napi::Value ProcessPoolObject::SwitchPlan(const Napi::CallbackInfo& info) {
  std::string error;
  if (!switchWith(api_->switchPlan, readPlan(info[0]), &error)) throw errorWithCode(info.Env(), "ERR_TP_POOL_CREATE", error);
  return info.Env().Undefined();
}

Napi::Value ProcessPoolObject::PrepareSwitch(const Napi::CallbackInfo& info) {
  return prepareSwitchPromise(info.Env(), readPlan(info[0]), [api = api_](const PlanSpec& plan, std::string* error) {
    return switchWith(api->prepareSwitch, plan, error);
  });
}

Napi::Value ProcessPoolObject::StartRecording(const Napi::CallbackInfo& info) {
  api_->startRecording(requireUintArg(info, 0, "limit"));
  return info.Env().Undefined();
}

Napi::Value ProcessPoolObject::StopRecording(const Napi::CallbackInfo& info) {
  api_->stopRecording();
  return info.Env().Undefined();
}

Napi::Value ProcessPoolObject::RecordingState(const Napi::CallbackInfo& info) {
  tp::RecordingState state{};
  api_->recordingState(&state);
  return recordingStateObject(info.Env(), state);
}

Napi::Value ProcessPoolObject::CopyRecording(const Napi::CallbackInfo& info) {
  const uint64_t from = requireUintArg(info, 0, "from");
  tp::RecordingState state{};
  api_->recordingState(&state);
  const uint64_t first = std::max(from, state.begin);
  std::vector<RecordedEvent> events(state.end > first ? state.end - first : 0);
  events.resize(api_->copyRecording(first, events.data(), events.size()));
  return recordingObject(info.Env(), events.data(), events.size());
}

Napi::Value ProcessPoolObject::DiscardRecording(const Napi::CallbackInfo& info) {
  api_->discardRecording(requireUintArg(info, 0, "before"));
  return info.Env().Undefined();
}

// Synchronous: giving back the free pages of a service's pool (tens of MiB) takes about a millisecond.
Napi::Value ProcessPoolObject::Trim(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), static_cast<double>(api_->trim()));
}

}  // namespace tp::napi

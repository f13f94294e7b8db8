#include "pool_object.h"

#include <algorithm>

#include "addon.h"
#include "args.h"
#include "async_work.h"
#include "stream_object.h"

namespace tp::napi {

namespace {

// Rides along with every external ArrayBuffer so that its finalizer can give back a block that was dropped
// without release. It names the allocation by serial number: after a release the block may already serve
// someone else, and then the finalizer must leave it alone. It also keeps the pool alive until the buffer
// is gone, so the arena is never unmapped under a live view.
struct Ticket {
  std::shared_ptr<Pool> pool;
  uint64_t serial;
};

void finalizeBlock(napi_env, void* data, void* hint) {
  Ticket* ticket = static_cast<Ticket*>(hint);
  ticket->pool->releaseIfSerial(data, ticket->serial);
  delete ticket;
}

Napi::Object statsObject(Napi::Env env, const PoolStats& s) {
  Napi::Object o = Napi::Object::New(env);
  auto set = [&](const char* key, uint64_t value) { setNumber(o, key, value); };
  set("allocs", s.allocs);
  set("releases", s.releases);
  set("finalized", s.finalized);
  set("hits", s.hits);
  set("borrows", s.borrows);
  set("grown", s.grown);
  set("osFallbacks", s.osFallbacks);
  set("osOversize", s.osOversize);
  set("liveBlocks", s.liveBlocks);
  set("bytesLive", s.bytesLive);
  set("peakBytesLive", s.peakBytesLive);
  set("osLiveBlocks", s.osLiveBlocks);
  set("osLiveBytes", s.osLiveBytes);
  set("arenaBytes", s.arenaBytes);
  set("reservedBytes", s.reservedBytes);
  set("committedBytes", s.committedBytes);
  set("arenas", s.arenas);
  set("unplannedBorrows", s.unplannedBorrows);
  set("iterations", s.iterations);
  set("generation", s.generation);
  set("switches", s.switches);
  set("preparedGeneration", s.preparedGeneration);
  set("scheduleHits", s.scheduleHits);
  set("scheduleMisses", s.scheduleMisses);
  set("offsetHits", s.offsetHits);
  set("offsetMisses", s.offsetMisses);
  set("eventsCreated", s.eventsCreated);
  set("eventsReused", s.eventsReused);
  set("deferredPending", s.deferredPending);
  set("deferredBytes", s.deferredBytes);
  o.Set("closed", Napi::Boolean::New(env, s.closed));
  return o;
}

// A plan as lib/plan-spec.ts's toNativePlan hands it over: { interval, sizes, blocks, scheduleSizes?,
// scheduleClasses? }, arrays as Float64Arrays. Class sizes and schedule entries are validated when the
// plan is built (SizeClassTable::build).
PlanSpec readPlan(const Napi::Value& value) {
  if (!value.IsObject()) throw Napi::TypeError::New(value.Env(), "plan must be an object");
  Napi::Object planArg = value.As<Napi::Object>();
  PlanSpec plan;
  plan.interval = optionalUint(planArg, "interval", 0);
  forEachUint(planArg.Get("sizes"), "plan.sizes", [&](size_t, uint64_t size) { plan.classes.push_back({size, 0}); });
  forEachUint(planArg.Get("blocks"), "plan.blocks", [&](size_t i, uint64_t blocks) {
    if (i >= plan.classes.size()) throw Napi::TypeError::New(value.Env(), "plan.blocks is longer than plan.sizes");
    plan.classes[i].blocks = blocks;
  });
  if (!planArg.Get("scheduleSizes").IsUndefined()) {
    std::vector<uint64_t> classes;
    forEachUint(planArg.Get("scheduleSizes"), "plan.scheduleSizes",
                [&](size_t, uint64_t size) { plan.schedule.push_back({size, 0}); });
    forEachUint(planArg.Get("scheduleClasses"), "plan.scheduleClasses",
                [&](size_t, uint64_t cls) { classes.push_back(cls); });
    if (classes.size() != plan.schedule.size()) {
      throw Napi::TypeError::New(value.Env(), "plan.scheduleClasses and plan.scheduleSizes differ in length");
    }
    for (size_t k = 0; k < classes.size(); ++k) {
      plan.schedule[k].classIndex = static_cast<uint32_t>(std::min<uint64_t>(classes[k], UINT32_MAX));
    }
  }
  return plan;
}

}  // namespace

OffsetSchedule readOffsetSchedule(const Napi::Value& value, const std::string& name) {
  if (!value.IsObject()) throw Napi::TypeError::New(value.Env(), name + " must be an object");
  Napi::Object o = value.As<Napi::Object>();
  OffsetSchedule schedule;
  schedule.height = requireUint(o.Get("height"), (name + ".height").c_str());
  forEachUint(o.Get("sizes"), (name + ".sizes").c_str(), [&](size_t, uint64_t v) { schedule.sizes.push_back(v); });
  forEachUint(o.Get("offsets"), (name + ".offsets").c_str(), [&](size_t, uint64_t v) { schedule.offsets.push_back(v); });
  return schedule;
}

Napi::Function PoolObject::Define(Napi::Env env) {
  return DefineClass(env, "NativePool",
                     {
                         InstanceMethod<&PoolObject::Alloc>("alloc"),
                         InstanceMethod<&PoolObject::Release>("release"),
                         InstanceMethod<&PoolObject::Stats>("stats"),
                         InstanceMethod<&PoolObject::ClassStats>("classStats"),
                         InstanceMethod<&PoolObject::Close>("close"),
                         InstanceMethod<&PoolObject::MarkIteration>("markIteration"),
                         InstanceMethod<&PoolObject::SwitchPlan>("switchPlan"),
                         InstanceMethod<&PoolObject::PrepareSwitch>("prepareSwitch"),
                         InstanceMethod<&PoolObject::StartRecording>("startRecording"),
                         InstanceMethod<&PoolObject::StopRecording>("stopRecording"),
                         InstanceMethod<&PoolObject::RecordingState>("recordingState"),
                         InstanceMethod<&PoolObject::CopyRecording>("copyRecording"),
                         InstanceMethod<&PoolObject::DiscardRecording>("discardRecording"),
                         InstanceMethod<&PoolObject::Reclaim>("reclaim"),
                         InstanceMethod<&PoolObject::SetEventPooling>("setEventPooling"),
                     });
}

PoolObject* PoolObject::From(const Napi::Value& value) {
  if (!value.IsObject()) return nullptr;
  Addon* addon = value.Env().GetInstanceData<Addon>();
  if (!addon || !value.As<Napi::Object>().InstanceOf(addon->poolConstructor.Value())) return nullptr;
  return Unwrap(value.As<Napi::Object>());
}

PoolObject::PoolObject(const Napi::CallbackInfo& info) : Napi::ObjectWrap<PoolObject>(info) {
  PlanSpec plan = info[0].IsNull() ? defaultPlan() : readPlan(info[0]);
  Napi::Object optionsArg = requireObjectArg(info, 1, "options");

  PoolOptions options;
  options.arena.prefault = optionalBool(optionsArg, "prefault", true);
  options.arena.hugePages = optionalBool(optionsArg, "hugePages", false);
  options.arena.lock = optionalBool(optionsArg, "lock", false);
  options.grow = optionalBool(optionsArg, "grow", false);
  options.growReserve = optionalUint(optionsArg, "growReserve", options.growReserve);
  options.osMapThreshold = optionalUint(optionsArg, "osMapThreshold", options.osMapThreshold);

  const Napi::Value offsetsArg = optionsArg.Get("offsets");
  const OffsetSchedule offsets =
      offsetsArg.IsUndefined() || offsetsArg.IsNull() ? OffsetSchedule{} : readOffsetSchedule(offsetsArg, "options.offsets");

  std::string error;
  pool_ = Pool::create(plan, options, &error, &offsets);
  if (!pool_) throw errorWithCode(info.Env(), "ERR_TP_POOL_CREATE", error);
}

Napi::Value PoolObject::Alloc(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const uint64_t bytes = requireUintArg(info, 0, "bytes");
  Allocation a = pool_->alloc(bytes);
  switch (a.status) {
    case AllocStatus::Ok: break;
    case AllocStatus::Closed: throw errorWithCode(env, "ERR_TP_CLOSED", "the pool is closed");
    case AllocStatus::BadSize:
      throw Napi::RangeError::New(env, "bytes must be between 1 and 2^47, got " + std::to_string(bytes));
    case AllocStatus::OutOfMemory:
      throw errorWithCode(env, "ERR_TP_OUT_OF_MEMORY",
                          "the operating system refused " + std::to_string(bytes) + " bytes");
  }
  Ticket* ticket = new Ticket{pool_, a.serial};
  napi_value result;
  napi_status status = napi_create_external_arraybuffer(env, a.data, bytes, finalizeBlock, ticket, &result);
  if (status != napi_ok) {
    pool_->release(a.data);
    delete ticket;
    NAPI_THROW_IF_FAILED(env, status, Napi::Value());
  }
  return Napi::Value(env, result);
}

Napi::Value PoolObject::Release(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::ArrayBuffer buffer = requireArrayBufferArg(info, 0, "buffer");
  if (buffer.IsDetached()) return Napi::Number::New(env, kDetached);
  StreamObject* stream = info[1].IsUndefined() ? nullptr : StreamObject::From(info[1]);
  if (!info[1].IsUndefined() && !stream) throw Napi::TypeError::New(env, "stream must be a NativeStream");
  const ReleaseStatus status = stream ? pool_->releaseAfter(buffer.Data(), stream->stream()) : pool_->release(buffer.Data());
  switch (status) {
    case ReleaseStatus::Ok: break;
    case ReleaseStatus::NotOwned: return Napi::Number::New(env, kNotOwned);
    case ReleaseStatus::NotLive:
    case ReleaseStatus::Stale: return Napi::Number::New(env, kNotLive);
  }
  // The block may be handed out again right away: no view on this buffer may reach it any more.
  buffer.Detach();
  return Napi::Number::New(env, kReleased);
}

Napi::Value PoolObject::Stats(const Napi::CallbackInfo& info) { return statsObject(info.Env(), pool_->stats()); }

Napi::Value PoolObject::ClassStats(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const std::vector<tp::ClassStats> classes = pool_->classStats();
  const size_t n = classes.size();
  Napi::Float64Array size = Napi::Float64Array::New(env, n), blocks = Napi::Float64Array::New(env, n),
                     free = Napi::Float64Array::New(env, n), hits = Napi::Float64Array::New(env, n),
                     lent = Napi::Float64Array::New(env, n), grown = Napi::Float64Array::New(env, n);
  for (size_t i = 0; i < n; ++i) {
    size[i] = static_cast<double>(classes[i].size);
    blocks[i] = static_cast<double>(classes[i].counters.blocks);
    free[i] = static_cast<double>(classes[i].counters.freeBlocks);
    hits[i] = static_cast<double>(classes[i].counters.hits);
    lent[i] = static_cast<double>(classes[i].counters.lent);
    grown[i] = static_cast<double>(classes[i].counters.grown);
  }
  Napi::Object o = Napi::Object::New(env);
  o.Set("interval", Napi::Number::New(env, static_cast<double>(pool_->interval())));
  o.Set("size", size);
  o.Set("blocks", blocks);
  o.Set("free", free);
  o.Set("hits", hits);
  o.Set("lent", lent);
  o.Set("grown", grown);
  return o;
}

Napi::Value PoolObject::Reclaim(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), static_cast<double>(pool_->reclaim()));
}

Napi::Value PoolObject::SetEventPooling(const Napi::CallbackInfo& info) {
  pool_->setEventPooling(info[0].IsBoolean() && info[0].As<Napi::Boolean>().Value());
  return info.Env().Undefined();
}

Napi::Value PoolObject::MarkIteration(const Napi::CallbackInfo& info) {
  const IterationSummary ended = pool_->markIteration();
  Napi::Object o = Napi::Object::New(info.Env());
  setNumber(o, "allocs", ended.allocs);
  setNumber(o, "bytes", ended.bytes);
  setNumber(o, "sizeHash", ended.sizeHash);
  setNumber(o, "osFallbacks", ended.osFallbacks);
  setNumber(o, "osOversize", ended.osOversize);
  setNumber(o, "unplannedBorrows", ended.unplannedBorrows);
  setNumber(o, "recorderEnd", ended.recorderEnd);
  setNumber(o, "installed", ended.installed);
  if (ended.installed) {
    // The retired arena's free pages go back to the OS off this thread: this mark stays short.
    queueWork(info.Env(), "tensorpool.discardRetired", [pool = pool_] { pool->discardRetired(); }, [](napi_env) {});
  }
  return o;
}

Napi::Value PoolObject::SwitchPlan(const Napi::CallbackInfo& info) {
  const PlanSpec plan = readPlan(info[0]);
  std::string error;
  if (!pool_->switchPlan(plan, &error)) throw errorWithCode(info.Env(), "ERR_TP_POOL_CREATE", error);
  return info.Env().Undefined();
}

Napi::Value PoolObject::PrepareSwitch(const Napi::CallbackInfo& info) {
  struct Outcome {
    uint64_t generation = 0;
    std::string error;
  };
  auto outcome = std::make_shared<Outcome>();
  PlanSpec plan = readPlan(info[0]);
  napi_deferred deferred;
  napi_value promise;
  NAPI_THROW_IF_FAILED(info.Env(), napi_create_promise(info.Env(), &deferred, &promise), Napi::Value());
  queueWork(
      info.Env(), "tensorpool.prepareSwitch",
      [pool = pool_, plan = std::move(plan), outcome] { outcome->generation = pool->prepareSwitch(plan, &outcome->error); },
      [deferred, outcome](napi_env env) {
        settleDeferred(env, deferred, static_cast<double>(outcome->generation), "ERR_TP_POOL_CREATE", outcome->error);
      });
  return Napi::Value(info.Env(), promise);
}

Napi::Value PoolObject::StartRecording(const Napi::CallbackInfo& info) {
  pool_->startRecording(requireUintArg(info, 0, "limit"));
  return info.Env().Undefined();
}

Napi::Value PoolObject::StopRecording(const Napi::CallbackInfo& info) {
  pool_->stopRecording();
  return info.Env().Undefined();
}

Napi::Value PoolObject::RecordingState(const Napi::CallbackInfo& info) {
  const tp::RecordingState state = pool_->recordingState();
  Napi::Object o = Napi::Object::New(info.Env());
  o.Set("on", Napi::Boolean::New(info.Env(), state.on));
  o.Set("truncated", Napi::Boolean::New(info.Env(), state.truncated));
  setNumber(o, "begin", state.begin);
  setNumber(o, "end", state.end);
  return o;
}

Napi::Value PoolObject::CopyRecording(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const std::vector<RecordedEvent> events = pool_->copyRecording(requireUintArg(info, 0, "from"));
  Napi::Uint8Array ops = Napi::Uint8Array::New(env, events.size());
  Napi::Float64Array serials = Napi::Float64Array::New(env, events.size());
  Napi::Float64Array values = Napi::Float64Array::New(env, events.size());
  for (size_t i = 0; i < events.size(); ++i) {
    ops[i] = static_cast<uint8_t>(events[i].op());
    serials[i] = static_cast<double>(events[i].serial);
    values[i] = static_cast<double>(events[i].payload());
  }
  Napi::Object o = Napi::Object::New(env);
  o.Set("ops", ops);
  o.Set("serials", serials);
  o.Set("values", values);
  return o;
}

Napi::Value PoolObject::DiscardRecording(const Napi::CallbackInfo& info) {
  pool_->discardRecording(requireUintArg(info, 0, "before"));
  return info.Env().Undefined();
}

Napi::Value PoolObject::Close(const Napi::CallbackInfo& info) {
  pool_->close();
  return info.Env().Undefined();
}

}  // namespace tp::napi

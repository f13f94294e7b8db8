#include "pool_values.h"

#include <algorithm>

#include "args.h"
#include "async_work.h"

namespace tp::napi {

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
  set("cachedBlocks", s.cachedBlocks);
  set("cachedBytes", s.cachedBytes);
  set("cacheRejected", s.cacheRejected);
  o.Set("closed", Napi::Boolean::New(env, s.closed));
  set("purgedBlocks", s.purgedBlocks);
  set("purgedBytes", s.purgedBytes);
  set("rewarmedBytes", s.rewarmedBytes);
  return o;
}

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
    if (!planArg.Get("scheduleBlocks").IsUndefined()) {
      forEachUint(planArg.Get("scheduleBlocks"), "plan.scheduleBlocks", [&](size_t k, uint64_t block) {
        if (k >= plan.schedule.size()) throw Napi::TypeError::New(value.Env(), "plan.scheduleBlocks is longer than the schedule");
        plan.schedule[k].block = static_cast<uint32_t>(std::min<uint64_t>(block, UINT32_MAX));
      });
    }
    if (!planArg.Get("iterationStarts").IsUndefined()) {
      forEachUint(planArg.Get("iterationStarts"), "plan.iterationStarts", [&](size_t, uint64_t start) { plan.iterationStarts.push_back(start); });
    }
    plan.cycle = optionalUint(planArg, "cycle", 1);
  }
  if (!planArg.Get("layoutClasses").IsUndefined()) {
    forEachUint(planArg.Get("layoutClasses"), "plan.layoutClasses", [&](size_t, uint64_t cls) {
      plan.layout.push_back({static_cast<uint32_t>(std::min<uint64_t>(cls, UINT32_MAX)), 0});
    });
    forEachUint(planArg.Get("layoutOffsets"), "plan.layoutOffsets", [&](size_t b, uint64_t offset) {
      if (b >= plan.layout.size()) throw Napi::TypeError::New(value.Env(), "plan.layoutOffsets is longer than plan.layoutClasses");
      plan.layout[b].offset = offset;
    });
  }
  return plan;
}

Napi::Object summaryObject(Napi::Env env, const IterationSummary& ended) {
  Napi::Object o = Napi::Object::New(env);
  setNumber(o, "allocs", ended.allocs);
  setNumber(o, "bytes", ended.bytes);
  setNumber(o, "sizeHash", ended.sizeHash);
  setNumber(o, "osFallbacks", ended.osFallbacks);
  setNumber(o, "osOversize", ended.osOversize);
  setNumber(o, "unplannedBorrows", ended.unplannedBorrows);
  setNumber(o, "grown", ended.grown);
  setNumber(o, "liveBlocks", ended.liveBlocks);
  setNumber(o, "recorderEnd", ended.recorderEnd);
  setNumber(o, "installed", ended.installed);
  return o;
}

Napi::Value summaryIfWanted(const Napi::CallbackInfo& info, const IterationSummary& ended) {
  if (info.Length() > 0 && info[0].IsBoolean() && !info[0].As<Napi::Boolean>().Value()) return info.Env().Undefined();
  return summaryObject(info.Env(), ended);
}

Napi::Object classStatsObject(Napi::Env env, const std::vector<ClassStats>& classes, uint64_t interval) {
  const size_t n = classes.size();
  Napi::Float64Array size = Napi::Float64Array::New(env, n), blocks = Napi::Float64Array::New(env, n),
                     free = Napi::Float64Array::New(env, n), hits = Napi::Float64Array::New(env, n),
                     lent = Napi::Float64Array::New(env, n), grown = Napi::Float64Array::New(env, n),
                     busy = Napi::Float64Array::New(env, n), cached = Napi::Float64Array::New(env, n);
  for (size_t i = 0; i < n; ++i) {
    size[i] = static_cast<double>(classes[i].size);
    blocks[i] = static_cast<double>(classes[i].counters.blocks);
    // Released blocks a front cache holds are free to their owner's next request of their size.
    free[i] = static_cast<double>(classes[i].counters.freeBlocks + classes[i].counters.cached);
    cached[i] = static_cast<double>(classes[i].counters.cached);
    hits[i] = static_cast<double>(classes[i].counters.hits);
    lent[i] = static_cast<double>(classes[i].counters.lent);
    grown[i] = static_cast<double>(classes[i].counters.grown);
    busy[i] = static_cast<double>(classes[i].counters.busy);
  }
  Napi::Object o = Napi::Object::New(env);
  o.Set("interval", Napi::Number::New(env, static_cast<double>(interval)));
  o.Set("size", size);
  o.Set("blocks", blocks);
  o.Set("free", free);
  o.Set("hits", hits);
  o.Set("lent", lent);
  o.Set("grown", grown);
  o.Set("busy", busy);
  o.Set("cached", cached);
  return o;
}

Napi::Object recordingStateObject(Napi::Env env, const RecordingState& state) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("on", Napi::Boolean::New(env, state.on));
  o.Set("truncated", Napi::Boolean::New(env, state.truncated));
  setNumber(o, "begin", state.begin);
  setNumber(o, "end", state.end);
  return o;
}

Napi::Object recordingObject(Napi::Env env, const RecordedEvent* events, size_t count) {
  Napi::Uint8Array ops = Napi::Uint8Array::New(env, count);
  Napi::Float64Array serials = Napi::Float64Array::New(env, count);
  Napi::Float64Array values = Napi::Float64Array::New(env, count);
  Napi::Uint16Array threads = Napi::Uint16Array::New(env, count);
  for (size_t i = 0; i < count; ++i) {
    const bool alloc = events[i].op() == RecordedOp::Alloc;
    ops[i] = static_cast<uint8_t>(events[i].op());
    serials[i] = static_cast<double>(events[i].serial);
    values[i] = static_cast<double>(alloc ? events[i].bytes() : events[i].payload());
    threads[i] = static_cast<uint16_t>(alloc ? events[i].thread() : 0);
  }
  Napi::Object o = Napi::Object::New(env);
  o.Set("ops", ops);
  o.Set("serials", serials);
  o.Set("values", values);
  o.Set("threads", threads);
  return o;
}

Napi::Value prepareSwitchPromise(Napi::Env env, PlanSpec plan, PrepareSwitchFn prepare) {
  struct Outcome {
    uint64_t generation = 0;
    std::string error;
  };
  auto outcome = std::make_shared<Outcome>();
  napi_deferred deferred;
  napi_value promise;
  NAPI_THROW_IF_FAILED(env, napi_create_promise(env, &deferred, &promise), Napi::Value());
  queueWork(
      env, "tensorpool.prepareSwitch",
      [prepare = std::move(prepare), plan = std::move(plan), outcome] { outcome->generation = prepare(plan, &outcome->error); },
      [deferred, outcome](napi_env settleEnv) {
        settleDeferred(settleEnv, deferred, static_cast<double>(outcome->generation), "ERR_TP_POOL_CREATE", outcome->error);
      });
  return Napi::Value(env, promise);
}

}  // namespace tp::napi

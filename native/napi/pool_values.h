// The pool's values as JS sees them, shared by the pool objects of the binding (NativePool and
// NativeProcessPool): counters, iteration summaries, class statistics, recordings, and plans coming in.
#pragma once

#include <napi.h>

#include <functional>
#include <string>
#include <vector>

#include "core/pool.h"

namespace tp::napi {

Napi::Object statsObject(Napi::Env env, const PoolStats& s);
// -> { allocs, bytes, sizeHash, osFallbacks, osOversize, unplannedBorrows, recorderEnd, installed }
Napi::Object summaryObject(Napi::Env env, const IterationSummary& ended);
// markIteration(wantSummary?): the summary object, or undefined when called with false (a caller that
// reads no summary, such as a pool without adaptive mode, does not pay for building one on every mark).
Napi::Value summaryIfWanted(const Napi::CallbackInfo& info, const IterationSummary& ended);
// -> { interval, size, blocks, free, hits, lent, grown } (Float64Arrays, one entry per class)
Napi::Object classStatsObject(Napi::Env env, const std::vector<ClassStats>& classes, uint64_t interval);
// -> { on, truncated, begin, end }
Napi::Object recordingStateObject(Napi::Env env, const RecordingState& state);
// -> { ops: Uint8Array, serials: Float64Array, values: Float64Array (bytes of an alloc, stream of a release),
//      threads: Uint16Array (the allocating thread's number; 0 for other events) }
Napi::Object recordingObject(Napi::Env env, const RecordedEvent* events, size_t count);

// A plan as lib/plan/plan-spec.ts's toNativePlan hands it over: { interval, sizes, blocks, scheduleSizes?,
// scheduleClasses? }, arrays as Float64Arrays. Class sizes and schedule entries are validated when the
// plan is built (SizeClassTable::build).
PlanSpec readPlan(const Napi::Value& value);

// Builds `plan`'s arena off the JS thread with `prepare` (a pool's prepareSwitch: the generation, or 0 with
// *error) and returns a promise of the generation, rejected with ERR_TP_POOL_CREATE.
using PrepareSwitchFn = std::function<uint64_t(const PlanSpec& plan, std::string* error)>;
Napi::Value prepareSwitchPromise(Napi::Env env, PlanSpec plan, PrepareSwitchFn prepare);

}  // namespace tp::napi

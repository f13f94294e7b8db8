// Plan training and static planning, exposed as plain functions over typed arrays.
#pragma once

#include <napi.h>

namespace tp::napi {

// (sizes, starts, ends: Float64Array, intervals: Float64Array, order: 'alloc-time' | 'size-desc')
//   -> per interval { sizes: Float64Array, blocks: Float64Array, borrows: number, classOf: Uint32Array
//      (per tensor), ms: number }; the intervals are trained in parallel.
Napi::Value TrainSizeClasses(const Napi::CallbackInfo& info);

// (sizes, starts, ends: Float64Array, intervals: Float64Array, searchMs: number) -> per interval, a time-shared plan (share.h):
//   { sizes, blocks: Float64Array (classes), classOf, blockOf: Uint32Array (per tensor), blockClass:
//   Uint32Array, blockOffset: Float64Array (per block), arenaBytes, ms }, or null where the layout failed.
Napi::Value TrainTimeShared(const Napi::CallbackInfo& info);

// (problem, { strategy, timeLimitMs, seed }) -> { offsets: Float64Array, peak, lowerBound, lowerBoundExact,
//   optimal, ms, notes, order: Uint32Array (greedy-size, s1), valid, why (the verifier's verdict) }. problem: { sizes: Float64Array, lower, upper: Float64Array } (lifetimes) or
//   { sizes, neighbourStarts: Float64Array (n + 1), neighbours: Float64Array } (a conflict graph, CSR).
Napi::Value PlanOffsets(const Napi::CallbackInfo& info);

// (problem, offsets: Float64Array) -> { valid: boolean, why: string }
Napi::Value VerifyOffsets(const Napi::CallbackInfo& info);

}  // namespace tp::napi

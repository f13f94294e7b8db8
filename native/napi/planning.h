// Plan training and static planning, exposed as plain functions over typed arrays.
#pragma once

#include <napi.h>

namespace tp::napi {

// (sizes, starts, ends: Float64Array, intervals: Float64Array, order: 'alloc-time' | 'size-desc')
//   -> per interval { sizes: Float64Array, blocks: Float64Array, borrows: number, classOf: Uint32Array
//      (per tensor), ms: number }; the intervals are trained in parallel.
Napi::Value TrainSizeClasses(const Napi::CallbackInfo& info);

}  // namespace tp::napi

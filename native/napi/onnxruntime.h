// The binding of ort_allocator.h: lending a pool to ONNX Runtime. lib/onnxruntime.ts finds the library and
// validates; these functions only check the shapes of their arguments.
#pragma once

#include <napi.h>

namespace tp::napi {

// (libraryPath: string, pool: NativePool) -> ONNX Runtime's version string; throws ERR_TP_ONNXRUNTIME
Napi::Value RegisterOrtAllocator(const Napi::CallbackInfo& info);
// () -> undefined; throws ERR_TP_ONNXRUNTIME
Napi::Value UnregisterOrtAllocator(const Napi::CallbackInfo& info);
// () -> { allocs, frees, heapFallbacks } of the pool registered last
Napi::Value OrtAllocatorCounters(const Napi::CallbackInfo& info);

}  // namespace tp::napi

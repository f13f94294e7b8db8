// Lends a pool to ONNX Runtime as the CPU allocator of its environment, so that the tensors a session makes
// itself (activations, outputs) come from the pool: sessions created with the config entry
// "session.use_env_allocators" = "1" allocate from it instead of their own arena.
//
// ONNX Runtime is reached through the library the process has already loaded (onnxruntime-node's), by its one
// exported symbol, OrtGetApiBase: no header or link-time dependency, so tensorpool builds and loads without it.
// Its environment is a process singleton, so the registration is process-wide: one pool at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/pool.h"

namespace tp::ort {

struct AllocatorCounters {
  uint64_t allocs = 0;         // ONNX Runtime's requests served by the pool
  uint64_t frees = 0;          // ... and given back
  uint64_t heapFallbacks = 0;  // requests the pool could not serve (closed), served by the C library
};

// Registers `pool` as the CPU allocator of the environment of the ONNX Runtime loaded from `libraryPath`
// (which must already be loaded in this process). A pool registered before is unregistered first; sessions
// created while it was registered keep allocating from it. Returns false with *error, nothing changed, when
// the library is not loaded, is not ONNX Runtime, is older than 1.16, or refuses the registration. On
// success *version is ONNX Runtime's version string.
bool registerAllocator(const char* libraryPath, std::shared_ptr<Pool> pool, std::string* version, std::string* error);

// Unregisters the pool registered last (sessions created from now on use their own allocator). False with
// *error when none is registered or ONNX Runtime refuses.
bool unregisterAllocator(std::string* error);

// The counters of the pool registered last (zero when none ever was).
AllocatorCounters allocatorCounters();

}  // namespace tp::ort

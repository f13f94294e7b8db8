// Pools shared between the environments of this process (the main thread and its worker_threads): a pool
// shared once is named by a number, which an environment that was sent it looks up to attach its own handle.
// The registry holds pools weakly: sharing keeps nothing alive, and a pool is gone (no longer found) once its
// last handle and buffer are.
#pragma once

#include <cstdint>
#include <memory>

#include "core/pool.h"

namespace tp::napi {

// The pool's number, the same on every call for one pool. Thread-safe, like findSharedPool().
uint64_t sharePool(const std::shared_ptr<Pool>& pool);

// The pool shared as `id`, or nullptr when no pool was shared as `id` or it is gone.
std::shared_ptr<Pool> findSharedPool(uint64_t id);

}  // namespace tp::napi

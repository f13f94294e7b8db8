// Helpers the native pool tests share.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "check.h"
#include "core/pool.h"

namespace tpt {

// A pool on the default classes that grows as `growth` says, into `reserve` bytes, decaying after `decayMs`.
inline std::shared_ptr<tp::Pool> growingPool(tp::Growth growth, uint64_t decayMs, uint64_t reserve = uint64_t{1} << 30) {
  tp::PoolOptions options;
  options.growth = growth;
  options.growReserve = reserve;
  options.decayMs = decayMs;
  std::string error;
  auto pool = tp::Pool::create(tp::defaultPlan(), options, &error);
  CHECK(pool != nullptr);
  return pool;
}

inline bool allZero(const void* data, uint64_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (uint64_t i = 0; i < bytes; ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

}  // namespace tpt

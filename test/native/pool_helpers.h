// Helpers the native pool tests share.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "check.h"
#include "core/pool.h"

namespace tpt {

// Decay's synthetic clock (PoolOptions::clock): time passes only where a test says, so decay's tests are the same
// on a loaded machine as on an idle one.
inline std::atomic<uint64_t> syntheticNs{uint64_t{1} << 40};
inline uint64_t syntheticClock() { return syntheticNs.load(std::memory_order_relaxed); }
inline void advanceMs(uint64_t ms) { syntheticNs.fetch_add(ms * 1000000, std::memory_order_relaxed); }

// A pool on the default classes that grows as `growth` says, into `reserve` bytes, decaying after `decayMs` of
// the synthetic clock.
inline std::shared_ptr<tp::Pool> growingPool(tp::Growth growth, uint64_t decayMs, uint64_t reserve = uint64_t{1} << 30) {
  tp::PoolOptions options;
  options.clock = syntheticClock;
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

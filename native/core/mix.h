// A bijective mix of 64 bits (the splitmix64 finaliser): the pool's order-independent hash of an
// iteration's sizes and the schedules' hash of a prefix of sizes both build on it.
#pragma once

#include <cstdint>

namespace tp {

inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace tp

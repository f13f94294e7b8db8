// What the live view shows beside the pool's counters (native/preload/stats_page.h): figures the pool does
// not keep as it goes, worked out under its lock when asked (Pool::gauges), never on an allocation's path.
#pragma once

#include <cstdint>

namespace tp {

struct PoolGauges {
  // As stats() gives them (PoolStats).
  uint64_t arenaBytes = 0, reservedBytes = 0, committedBytes = 0, arenas = 0, preparedGeneration = 0;
  // Free memory the serving classes hold resident: what decay could still give back where they decay
  // (SizeClassPool::idleBytes), every free block where they do not (a plan's, pre-faulted).
  uint64_t idleBytes = 0;
  // Where the arenas' carved memory lies, the serving arena's first, then those draining, a prepared one, the
  // offsets arena (up to kRanges of them): a reader counts their resident pages (/proc/PID/pagemap).
  static constexpr unsigned kRanges = 6;
  struct Range {
    uint64_t start = 0, bytes = 0;
  };
  Range ranges[kRanges];
  uint64_t rangeCount = 0;
};

// Blocks and spans by the power of two of their capacity: bucket k holds capacities in [2^k, 2^(k+1)).
struct SizeBucket {
  uint64_t liveBlocks = 0, liveBytes = 0;  // arena blocks and spans live (deferred, cached), bytes asked for
                                           // (a block of a class: its capacity, the pool keeps no other)
  uint64_t osBlocks = 0, osBytes = 0;      // live blocks the OS mapped (fallbacks, oversize, moved), bytes asked for
  uint64_t freeBlocks = 0;                 // free blocks and spans of the serving classes
  uint64_t idleBytes = 0;                  // ... the capacity of those that hold their pages
  uint64_t givenBackBytes = 0;             // ... of those whose pages went back to the OS (they read as zero)
};
struct SizeBuckets {
  static constexpr unsigned kCount = 48;  // up to 2^48 bytes (Pool::kMaxRequest is 2^47)
  SizeBucket buckets[kCount];
  static unsigned of(uint64_t capacity) { return capacity == 0 ? 0 : 63 - static_cast<unsigned>(__builtin_clzll(capacity)); }
  SizeBucket& at(uint64_t capacity) { return buckets[of(capacity) < kCount ? of(capacity) : kCount - 1]; }
};

}  // namespace tp

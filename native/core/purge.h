// Giving the serving classes' free memory back to the OS: one path for every reason the pool gives back for,
// with a budget, and one count of what went back (PoolStats::purgedBlocks, purgedBytes). The decay model
// (core/decay.h) says when memory has been idle long enough; the triggers (the pool's calls, decay's thread,
// a quiet program's sleeps, malloc_trim, memory growing beside the pool) only choose the reason.
#pragma once

#include <cstdint>

namespace tp {

class SizeClassPool;
struct BlockHeader;

enum class PurgeReason : uint8_t {
  Decay,         // what the classes found idle across the epochs that ended (SizeClassPool::purgeDue), in budget
  All,           // every idle block and span now (purgeAll): malloc_trim, or a quiet spell as long as the period
  MappedBeside,  // a block realloc moved into a mapping of its own, or whose mapping grew: whole free spans
                 // worth `bytes`, those freed in an epoch that ended first (purgeSpansFor)
  HeapBeside,    // memory beside the pool grew by `bytes` (the C library's heap): that much of the free spans,
                 // and no more (purgeSpanBytes)
  Moved,         // `block`, just given back by realloc, which moved its contents elsewhere (purgeGiven)
  ArenaGrew,     // the arena grew for a request no free memory of the pool's held, past what the most ever live
                 // needs: `bytes` of the free spans, as HeapBeside (purgeSpanBytes)
  OsBlock,       // the OS mapped `bytes` for a block beside the arena (larger than every class, or the arena's
                 // reservation spent): that much of the free spans, as HeapBeside (purgeSpanBytes)
};

struct PurgeRequest {
  PurgeReason reason;
  uint64_t bytes = 0;             // MappedBeside, HeapBeside, ArenaGrew, OsBlock: how much
  BlockHeader* block = nullptr;   // Moved: which
  // Bounds on one turn's work (a MADV_DONTNEED of 64 MiB takes ~1 ms): Decay's blocks and bytes, the bytes of
  // MappedBeside, HeapBeside, ArenaGrew and OsBlock. All and Moved are not bounded.
  uint64_t maxBlocks = kBlocksPerTurn;
  uint64_t maxBytes = kBytesPerTurn;
  static constexpr uint64_t kBlocksPerTurn = 64;
  static constexpr uint64_t kBytesPerTurn = uint64_t{64} << 20;
};

struct PurgeCounts {
  uint64_t blocks = 0;  // blocks and spans whose pages went back
  uint64_t bytes = 0;   // their capacity
};

// Gives back free memory of `classes` as `request` asks, adding what went back to *counts. Returns the bytes
// given back. Nothing where the classes do not decay (a plan's, time-shared or locked ones). Never throws: where
// memory is short for the spans' bookkeeping, what was given back stays so (a span it was merging is then lost
// to the heap, SpanHeap::give says how). Pre: the pool's lock is held.
uint64_t purge(SizeClassPool& classes, const PurgeRequest& request, PurgeCounts* counts);

}  // namespace tp

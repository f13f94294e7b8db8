// Size-class linked blocks (S0 steps 3-5): one arena carved into blocks per the plan, one free list of
// blocks per class, linked through the blocks' headers. Not thread-safe: Pool serialises access.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "arena.h"
#include "classes.h"
#include "header.h"

namespace tp {

struct ClassCounters {
  uint64_t blocks = 0;      // blocks of this class carved so far
  uint64_t freeBlocks = 0;  // on the free list now
  uint64_t hits = 0;        // requests served from their own class
  uint64_t lent = 0;        // requests of smaller classes served by a block of this class (borrows)
  uint64_t grown = 0;       // blocks carved on demand after creation (growing pools)
};

// Grown: carved for a request of its own class; GrownLent: carved in the smallest class holding a request
// that has no class of its own.
enum class Source : uint8_t { Own, Borrowed, Grown, GrownLent };

// Whether, and when, a pool carves new blocks from its spare reservation.
enum class Growth : uint8_t {
  Off,
  // The default classes: dense (four per doubling), so a larger class lending wastes up to half the
  // block; an empty own class grows first.
  BeforeBorrowing,
  // A trained plan: borrowing is part of what training planned, so it comes first; a class grows only
  // when nothing free fits (where a plan that does not grow goes to the OS).
  AfterBorrowing,
};

class SizeClassPool {
 public:
  // Builds the classes, reserves one arena for every planned block (plus `extraReserve` bytes of room to
  // grow, when `grow`), and carves the planned blocks, pre-faulted per `arenaOptions`.
  static std::unique_ptr<SizeClassPool> create(uint32_t id, uint64_t secret, const PlanSpec& plan,
                                               const ArenaOptions& arenaOptions, Growth growth, uint64_t extraReserve,
                                               std::string* error);

  // A free block for `bytes`, in S0's order: the own class; the larger classes, ascending; nullptr when there
  // is none (the caller asks the OS). A growing pool carves a block in the first class that holds the
  // request: before borrowing or after it, as its Growth says. The block is marked live.
  BlockHeader* take(uint64_t bytes, Source* source);
  // A free block of class `cls` for `bytes` (a scheduled placement), or nullptr when the class has none.
  // Pre: cls < table().count() and bytes <= table().size(cls).
  BlockHeader* takeFrom(size_t cls, uint64_t bytes, Source* source);
  // Returns a live or deferred block of this pool to its class's free list (its pages to the OS, once
  // retired).
  void give(BlockHeader* header);
  // This pool serves no more (a newer plan does): blocks that come back give their pages to the OS, so that
  // a draining arena holds memory only under live blocks. With discardFree the free blocks' pages go now;
  // without, the caller discards freeRanges() itself (Pool does it off its lock, as no retired block is
  // ever handed out again).
  void retire(bool discardFree);
  // The data of every free block: (start, bytes).
  std::vector<std::pair<char*, uint64_t>> freeRanges() const;

  // The header of the block whose data starts at `data`, or nullptr when `data` is not the start of a block
  // of this pool. Never reads memory outside the arena.
  BlockHeader* headerOf(const void* data) const;

  uint32_t id() const { return id_; }
  const SizeClassTable& table() const { return table_; }
  const std::vector<ScheduleEntry>& schedule() const { return schedule_; }
  const std::vector<ClassCounters>& counters() const { return counters_; }
  const Arena& arena() const { return *arena_; }
  uint64_t outstandingBlocks() const { return outstanding_; }  // live + deferred
  static uint64_t strideOf(uint64_t classSize) { return kHeaderBytes + roundUp(classSize, kBlockAlign); }

 private:
  SizeClassPool() = default;
  BlockHeader* carveBlock(size_t cls, std::string* error);
  // Carves a block in class `cls` for a request it is (`own`) or is not the own class of; nullptr when the
  // reservation is spent.
  BlockHeader* grow(size_t cls, bool own, Source* source);
  BlockHeader* markLive(BlockHeader* header, uint64_t bytes);
  void push(size_t cls, BlockHeader* header);
  BlockHeader* pop(size_t cls);
  // First class >= from with a free block, or -1.
  int firstNonEmpty(size_t from) const;

  uint32_t id_ = 0;
  uint64_t secret_ = 0;
  Growth growth_ = Growth::Off;
  bool retired_ = false;
  SizeClassTable table_;
  std::vector<ScheduleEntry> schedule_;
  std::unique_ptr<Arena> arena_;
  std::vector<BlockHeader*> heads_;       // free list per class
  std::vector<uint64_t> nonEmpty_;        // bit per class: its free list is not empty
  std::vector<ClassCounters> counters_;
  uint64_t outstanding_ = 0;
  std::string lastGrowError_;  // why the last growth failed (reservation exhausted, or the OS refused pages)
};

}  // namespace tp

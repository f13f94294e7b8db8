// The offsets-mode arena: one pre-faulted region laid out by a static plan (native/planner). The k-th
// allocation of an iteration is served at its planned offset when its size is the planned one and that
// range is free right now, which a run that repeats the plan always finds; a run that departs from it is
// refused here (the pool then routes by size class), so no two live blocks ever overlap. Blocks carry no
// header: the arena knows its live blocks by offset. Not thread-safe: Pool serialises access.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/arena.h"

namespace tp {

struct OffsetSchedule {
  uint64_t height = 0;            // bytes the plan needs
  std::vector<uint64_t> sizes;    // per allocation, in order: bytes asked
  std::vector<uint64_t> offsets;  // ... and where it goes (multiples of 64)
  bool empty() const { return sizes.empty(); }
};

class OffsetArena {
 public:
  // Checks the schedule (offsets 64-byte aligned, every block inside the height) and maps the arena.
  static std::unique_ptr<OffsetArena> create(const OffsetSchedule& schedule, const ArenaOptions& options, std::string* error);

  size_t positions() const { return schedule_.sizes.size(); }
  // A block that occupies its range: live, or deferred (its release waits for a stream; no longer live).
  struct Block {
    uint64_t end;
    uint64_t requested;
    uint64_t serial;
    bool deferred;
  };

  // The block planned for position k if it asked for `bytes` and its range is free; else nullptr.
  void* take(uint64_t k, uint64_t bytes, uint64_t serial);
  // Where position k is planned, when it asks for no more than planned; else nullptr. Nothing is checked
  // or kept about what is live (the replay's ideal yardstick, replay.h).
  void* planned(uint64_t k, uint64_t bytes) const {
    return k < schedule_.sizes.size() && bytes <= schedule_.sizes[k] ? arena_->base() + schedule_.offsets[k] : nullptr;
  }
  // The live (not deferred) block that starts at `data`, or nullptr. Valid until the block is given back.
  Block* live(const void* data);
  bool contains(const void* data) const { return arena_->contains(data); }
  // Pre: a block (live or deferred) starts at `data`.
  void give(const void* data);

  size_t liveBlocks() const { return live_.size(); }
  const Arena& arena() const { return *arena_; }

 private:
  using Blocks = std::map<uint64_t, Block>;  // by offset; ranges never overlap
  uint64_t offsetOf(const void* data) const {
    return reinterpret_cast<uintptr_t>(data) - reinterpret_cast<uintptr_t>(arena_->base());
  }

  OffsetSchedule schedule_;
  std::unique_ptr<Arena> arena_;
  Blocks live_;
  // Nodes of blocks given back, reused by take(): the steady state allocates nothing.
  std::vector<Blocks::node_type> spare_;
};

}  // namespace tp

// The out-of-line headers of a span pool's spans (header.h), by where each span starts: an open-addressing
// table of (start, header) pairs, probed linearly. Every free() of a span looks its header up here, under the
// pool's lock. A lookup reads the table's line and then the header's; std::unordered_map, which held the headers
// in its nodes, read the bucket, the node before and the node (192 bytes each: a 64-byte aligned header after
// the link) after a division, and was the pool's largest single cost on 2 cores freeing spans across threads
// (bench/handoff.ts). Headers sit in chunks that never move: a header's address is stable while it is indexed,
// and stays readable (its storage not reused) until the next obtain() after its erase().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/header.h"

namespace tp {

class SpanHeaders {
 public:
  bool empty() const { return count_ == 0; }
  size_t size() const { return count_; }

  // The header indexed at `start`, or nullptr. Pre: start != 0.
  BlockHeader* find(uintptr_t start) const {
    if (count_ == 0) return nullptr;
    for (size_t i = home(start);; i = (i + 1) & mask_) {
      const Slot& slot = slots_[i];
      if (slot.start == start) return slot.header;
      if (slot.start == 0) return nullptr;
    }
  }

  // The header indexed at `start`, indexed now (reading as BlockHeader{}) where none was. Throws std::bad_alloc
  // with nothing changed where the table or a chunk of headers cannot grow. Pre: start != 0.
  BlockHeader* obtain(uintptr_t start) {
    if (BlockHeader* header = find(start)) return header;
    if (2 * (count_ + 1) > slots_.size()) rehash(slots_.empty() ? kFirstSlots : 2 * slots_.size());
    if (spare_.empty()) addChunk();
    BlockHeader* header = spare_.back();
    spare_.pop_back();
    *header = BlockHeader{};
    size_t i = home(start);
    while (slots_[i].start != 0) i = (i + 1) & mask_;
    slots_[i] = {start, header};
    ++count_;
    return header;
  }

  // Calls f(header) for every header indexed, in no particular order.
  template <typename F>
  void forEach(F f) const {
    for (const Slot& slot : slots_) {
      if (slot.start != 0) f(*slot.header);
    }
  }

  // Drops the header at `start`, if one is indexed; its storage goes to a later obtain(). Never throws.
  void erase(uintptr_t start) {
    if (count_ == 0) return;
    size_t i = home(start);
    while (slots_[i].start != start) {
      if (slots_[i].start == 0) return;
      i = (i + 1) & mask_;
    }
    spare_.push_back(slots_[i].header);  // capacity reserved for every header made (addChunk)
    --count_;
    // Backward-shift deletion: the entries after the hole that may sit in it move back, so that every probe
    // still reaches its key before an empty slot.
    for (size_t hole = i, j = (i + 1) & mask_;; j = (j + 1) & mask_) {
      if (slots_[j].start == 0) {
        slots_[hole] = {};
        return;
      }
      const size_t want = home(slots_[j].start);
      // Entry j stays where its home lies cyclically in (hole, j]; otherwise it fills the hole.
      const bool stays = hole <= j ? (hole < want && want <= j) : (hole < want || want <= j);
      if (!stays) {
        slots_[hole] = slots_[j];
        hole = j;
      }
    }
  }

 private:
  struct Slot {
    uintptr_t start = 0;  // 0: empty (no span starts at address 0)
    BlockHeader* header = nullptr;
  };
  static constexpr size_t kFirstSlots = 64;
  static constexpr size_t kChunkHeaders = 32;  // 2 KiB: below any threshold a process pool serves from (its own malloc)

  // Fibonacci hashing of the start (64-byte aligned: its low bits say nothing).
  size_t home(uintptr_t start) const { return static_cast<size_t>(((start >> 6) * 0x9E3779B97F4A7C15ull) >> shift_) & mask_; }

  void rehash(size_t slots) {
    std::vector<Slot> grown(slots);  // may throw: nothing changed yet
    std::vector<Slot> old = std::move(slots_);
    slots_ = std::move(grown);
    mask_ = slots - 1;
    shift_ = 64 - static_cast<unsigned>(__builtin_ctzll(slots));
    for (const Slot& slot : old) {
      if (slot.start == 0) continue;
      size_t i = home(slot.start);
      while (slots_[i].start != 0) i = (i + 1) & mask_;
      slots_[i] = slot;
    }
  }

  void addChunk() {
    spare_.reserve(made_ + kChunkHeaders);  // erase() then never allocates
    chunks_.reserve(chunks_.size() + 1);
    auto chunk = std::make_unique<BlockHeader[]>(kChunkHeaders);
    for (size_t i = 0; i < kChunkHeaders; ++i) spare_.push_back(&chunk[kChunkHeaders - 1 - i]);
    chunks_.push_back(std::move(chunk));
    made_ += kChunkHeaders;
  }

  std::vector<Slot> slots_;  // a power of two of them, at most half in use
  size_t mask_ = 0;
  unsigned shift_ = 64;
  size_t count_ = 0;
  std::vector<std::unique_ptr<BlockHeader[]>> chunks_;
  std::vector<BlockHeader*> spare_;  // headers of the chunks not indexed
  size_t made_ = 0;                  // headers in the chunks
};

}  // namespace tp

// Free spans of an arena (Growth::Spans): ranges of any length, found by best fit, split on the way out and
// coalesced with their free neighbours on the way back in. Where the default classes keep a free block of
// each size a program once asked for, spans let a request of one size take memory another size freed: a
// program whose shapes change (an inference service over several input shapes) or whose tensors of one
// size peak at another moment than those of the next (torch training) holds about its live peak, not the sum
// of every size's own peak.
//
// Bookkeeping only: the heap never reads or writes the memory it indexes (its caller keeps the spans' headers).
// Each span remembers the decay epoch it was last freed in and whether it reads as zero.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "core/node_slab.h"

namespace tp {

class SpanHeap {
 public:
  // `looseBytes`: give() says.
  explicit SpanHeap(uint64_t looseBytes = 0) : looseBytes_(looseBytes) {}
  struct Span {
    char* start = nullptr;
    uint64_t bytes = 0;
    bool zero = false;  // reads as zero (never written, or its pages given back)
  };

  // The smallest free span of at least `bytes` (the lowest such on a tie), taken; what is left of it beyond
  // `bytes` stays free when it is at least `minRest` bytes, else it goes with the span. Where no span is
  // that large, the shortest run of free spans side by side that is (spans give() kept apart), taken as
  // one; the starts inside it that may hold a block header are appended to `absorbed` (the caller
  // invalidates those headers). False when neither exists.
  bool takeBestFit(uint64_t bytes, uint64_t minRest, Span* out, std::vector<char*>* absorbed);
  // The free spans side by side that end at `end` (the arena's carved end), taken as one, so that the arena
  // grows them instead of carving a span beside them; `absorbed` as takeBestFit's. False when the last span
  // does not end there.
  bool takeEndingAt(const char* end, Span* out, std::vector<char*>* absorbed);
  // The first `bytes` of the free spans side by side that start at `start` (a live block just before them
  // grows in place), taken, the rest left as takeBestFit leaves it; `absorbed` as takeBestFit's. False when
  // they hold less than `bytes`.
  bool takeAt(const char* start, uint64_t bytes, uint64_t minRest, Span* out, std::vector<char*>* absorbed);
  // Frees `span` in epoch `epoch`, merged with the free spans just before and after it where both read as
  // zero, or neither does and both were freed in the same epoch. (A span freed in an older epoch stays apart
  // from the newer one beside it, so that decay can tell it idle: merged, memory a program reuses every
  // iteration would keep its idle neighbours resident for good. A span that reads as zero stays apart from
  // one that does not, so that what was given back is known as such: merged into a span that does not read
  // as zero, decay would give it back and count it again, and calloc would write it. But for a span that
  // reads as zero and is smaller than `looseBytes` (the heap's: the pages skipped between spans carved apart,
  // which no request takes alone): it merges with any neighbour, so that spans carved apart still coalesce,
  // at the cost of those few pages being given back again or written.) A request larger than
  // every span still takes neighbours kept apart, as a run (takeBestFit, takeAt). The starts of the spans
  // that are no longer starts and may still hold a block header (the span itself when merged into its
  // predecessor, its successor when that does not read as zero) are written to `absorbed` (at most two;
  // returns how many): the caller invalidates those headers. A merged span was last freed in the latest of
  // its parts' epochs.
  // Throws std::bad_alloc where a node cannot be allocated: `span`, and the neighbours it was being merged
  // with, are then in no index (lost to the heap, never handed out), and every index still agrees.
  int give(Span span, uint64_t epoch, char* absorbed[2]);

  // Memory below `fence` is a trained plan's span reserve: free spans there never merge with those at or
  // above it (a span given that reaches across is kept as two); once keep() is called, decay never lists
  // them (idleSince). Pre: no free span reaches across `fence` now, and every free span below it reads as zero.
  void fenceAt(const char* fence) { fence_ = reinterpret_cast<uintptr_t>(fence); }
  void keep() { keeping_ = true; }
  // Whether the span at `start` lies in the reserve, kept.
  bool kept(const char* start) const { return keeping_ && reinterpret_cast<uintptr_t>(start) < fence_; }
  // Where the reserve ends (fenceAt; 0 without one).
  uintptr_t fence() const { return fence_; }
  // Decay: the free spans at or above the fence last freed before epoch `before` that do not read as zero, in
  // address order, until `maxSpans` of them or `maxBytes` (at least one span while the bytes last).
  std::vector<Span> idleSince(uint64_t before, uint64_t maxSpans, uint64_t maxBytes) const;
  // The free span at `start` now reads as zero (its pages were given back), and is merged with its free
  // neighbours as give() merges (those that read as zero); its absorbed starts as give() says. Pre: a free
  // span starts there.
  int markZero(const char* start, char* absorbed[2]);
  // Every free span, in address order.
  std::vector<Span> spans() const;
  // Bytes of the free spans side by side that start at `start`, or 0 when no free span starts there.
  uint64_t bytesAt(const char* start) const;
  size_t count() const { return byStart_.size(); }
  uint64_t freeBytes() const { return freeBytes_; }
  // Bytes of the free spans that do not read as zero and that decay may list (idleSince): those below the
  // fence only until keep(). What decay could still give back; 0 once it has given back all it would.
  uint64_t idleResidentBytes() const { return residentBytes_[0] + (keeping_ ? 0 : residentBytes_[1]); }

 private:
  struct Entry {
    uint64_t bytes;
    uint64_t epoch;
    bool zero;
  };
  using Starts = std::map<uintptr_t, Entry, std::less<uintptr_t>, SlabAllocator<std::pair<const uintptr_t, Entry>>>;
  // (bytes, start) of every free span, and its entry in byStart_: a best fit found here needs no search of
  // byStart_ (a tree walk, a cache miss a level: half of a take's cost on the handoff bench).
  using SizeKey = std::pair<uint64_t, uintptr_t>;
  using Sizes = std::map<SizeKey, Starts::iterator, std::less<SizeKey>, SlabAllocator<std::pair<const SizeKey, Starts::iterator>>>;
  // Both indexes' nodes come from slab_ (node_slab.h): a take splits a span and a give merges it, each removing
  // nodes and inserting others, and a node from the C library cost a trip through its lock under the pool's
  // (four or so an operation: a 1-thread run of the handoff program, bench/handoff.ts, took 0.56-0.59 s with
  // them, 0.52-0.53 s with 8 nodes of each kept) and two cache lines where it straddled them.
  // `following`: the first span after `start` (end() for none), a hint that spares the search of byStart_.
  void insert(uintptr_t start, const Entry& entry, Starts::const_iterator following);
  // `bySize`: the span's entry in bySize_ where the caller has it, else bySize_.end() (then it is searched).
  Span remove(Starts::iterator at, Sizes::iterator bySize);
  Span remove(Starts::iterator at) { return remove(at, bySize_.end()); }
  // Takes the spans [first, last] (side by side) as one span, the first `bytes` of it (all of it with 0),
  // the rest left as takeBestFit leaves it.
  // `firstBySize`: first's entry in bySize_, or bySize_.end() (remove()'s).
  Span takeRun(Starts::iterator first, Starts::iterator last, uint64_t bytes, uint64_t minRest, std::vector<char*>* absorbed,
               Sizes::iterator firstBySize);
  // give()'s merge of the free span `entry` at `start` (not in the index) with its neighbours; then inserts it.
  int merge(uintptr_t start, Entry entry, char* absorbed[2]);
  // Whether free spans `a` (at aStart) and `b` (at bStart), side by side, become one: never across the
  // fence; a loose zero span (pages skipped between carved spans) with either kind; otherwise two that read
  // as zero, or two that do not, freed in the same epoch.
  bool mergeable(uintptr_t aStart, const Entry& a, uintptr_t bStart, const Entry& b) const {
    if ((aStart < fence_) != (bStart < fence_)) return false;
    const bool loose = (a.zero && a.bytes < looseBytes_) || (b.zero && b.bytes < looseBytes_);
    return loose || (a.zero == b.zero && (a.zero || a.epoch == b.epoch));
  }

  uint64_t looseBytes_;
  NodeSlab slab_;  // before the indexes: they give their nodes back to it as they go
  Starts byStart_{Starts::allocator_type(&slab_)};
  Sizes bySize_{Sizes::allocator_type(&slab_)};
  uint64_t freeBytes_ = 0;
  // Bytes of the free spans that do not read as zero: [0] at or above the fence, [1] below it.
  uint64_t residentBytes_[2] = {0, 0};
  uint64_t& residentOf(uintptr_t start) { return residentBytes_[start < fence_ ? 1 : 0]; }
  uintptr_t fence_ = 0;  // fenceAt()
  bool keeping_ = false;  // keep()
};

}  // namespace tp

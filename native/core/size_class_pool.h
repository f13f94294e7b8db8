// Size-class linked blocks (S0 steps 3-5): one arena carved into blocks per the plan, one free list of
// blocks per class, linked through the blocks' headers. Not thread-safe: Pool serialises access.
//
// Time-shared pools (a plan with a layout, issue 13): blocks sit at the plan's offsets and may share memory
// with others. A block's header is then valid only while it is live (a live block sharing its memory
// writes over it), so the free lists live out of line, in one record per block. A free block is handed out
// only when none of the blocks sharing its memory is live: checked when it is taken (a read of their live
// flags), so that a release costs what it costs without sharing.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/arena.h"
#include "core/classes.h"
#include "core/header.h"
#include "core/pool_gauges.h"
#include "core/schedule.h"
#include "core/span_heap.h"
#include "core/span_headers.h"

namespace tp {

struct ClassCounters {
  uint64_t blocks = 0;      // blocks of this class carved so far
  uint64_t freeBlocks = 0;  // on the free list now
  uint64_t cached = 0;      // held by a front cache (Pool::applyCached): not live, not on the free list
  uint64_t hits = 0;        // requests served from their own class
  uint64_t lent = 0;        // requests of smaller classes served by a block of this class (borrows)
  uint64_t grown = 0;       // blocks carved on demand after creation (growing pools)
  uint64_t busy = 0;        // time-shared pools: a request found this class's free blocks' memory in use by
                            // blocks sharing it (or its scheduled block so), and went elsewhere
};

// Grown: carved for a request of its own class; GrownLent: carved in the smallest class holding a request
// that has no class of its own.
enum class Source : uint8_t { Own, Borrowed, Grown, GrownLent };

// Whether, and when, a pool carves new blocks from its spare reservation.
enum class Growth : uint8_t {
  Off,
  // The default classes: dense (four per doubling). An empty own class borrows from the next
  // kNearLenders classes (a block up to twice the request) before it grows, and from farther ones only
  // when it cannot grow: a block far larger than the request would waste most of itself, and one that
  // near would otherwise stay free while a new one is carved. A program whose sizes vary from run to run
  // (an OCR model on several image shapes) otherwise holds a block in every class each shape asks for.
  BeforeBorrowing,
  // A trained plan: borrowing is part of what training planned, so it comes first; a class grows only
  // when nothing free fits (where a plan that does not grow goes to the OS).
  AfterBorrowing,
  // The default classes of the process pool: requests of at least kSpanFrom bytes (up to the largest class)
  // are served from spans of the arena (SpanHeap: best fit, split, coalesced when freed) rather than from
  // blocks of their class, smaller ones as BeforeBorrowing. A free span serves any request it holds, so
  // memory one size freed serves the next size, and a program whose shapes vary holds about its live peak.
  // A span handed out is a block like any other to the rest of the pool, counted as a hit of the request's
  // class (grown when the arena was carved for it); it is never cacheable by a front cache.
  Spans,
};

class SizeClassPool {
 public:
  // Growth::Spans: requests from this size up are served by spans, and a span is split only where at least
  // a span of this size is left over. Also the smallest threshold the preload library takes (options.cc):
  // below it the pool would serve small objects from blocks of a class each, which no other size reuses.
  static constexpr uint64_t kSpanFrom = uint64_t{64} << 10;

  // Builds the classes, reserves one arena for every planned block (plus `extraReserve` bytes of room to
  // grow, when `grow`), and carves the planned blocks, pre-faulted per `arenaOptions`.
  static std::unique_ptr<SizeClassPool> create(uint32_t id, uint64_t secret, const PlanSpec& plan,
                                               const ArenaOptions& arenaOptions, Growth growth, uint64_t extraReserve,
                                               std::string* error);

  // A free block for `bytes`, in S0's order: the own class; the larger classes, ascending; nullptr when there
  // is none (the caller asks the OS). A growing pool carves a block in the first class that holds the
  // request: before borrowing or after it, as its Growth says. The block is marked live. In a time-shared
  // pool take() serves what the schedule did not place, and a growing one gives it memory no scheduled
  // block shares first: a free block grown before, else a new one.
  BlockHeader* take(uint64_t bytes, Source* source);
  // A free block of class `cls` for `bytes` (a scheduled placement), or nullptr when the class has none.
  // Pre: cls < table().count() and bytes <= table().size(cls).
  BlockHeader* takeFrom(size_t cls, uint64_t bytes, Source* source);
  // Time-shared pools: block `block` of the layout for `bytes` when it is available, else nullptr (counted
  // busy when only its memory being in use stood in the way). Pre: block < layout size, and the block's
  // class holds bytes.
  BlockHeader* takeBlock(uint32_t block, uint64_t bytes, Source* source);
  // Time-shared pools: the smallest class of the cached blocks that keep block `block` from being taken
  // (itself, or blocks sharing its memory), or -1 when none does. Pre: block < layout size.
  int cachedBlocking(uint32_t block) const;
  // Whether class `cls` has a free block (in a time-shared pool it may still be busy).
  bool hasFree(size_t cls) const { return (nonEmpty_[cls / 64] >> (cls % 64)) & 1; }
  // A live block's owner released it into a front cache (Pool::applyCached): it becomes Cached.
  void cache(BlockHeader* header);
  // The front cache serves it again: live for `bytes` (at most its capacity), counted as take() counts a
  // block off the free list. Returns Own or Borrowed.
  Source reuse(BlockHeader* header, uint64_t bytes);
  // realloc in place (Growth::Spans): live span `header` grows to hold `bytes` where the memory after it is
  // a free span (the part it needs taken) or the arena's spare reservation (carved). False, and nothing
  // changes, where neither is so, or when `bytes` is above every class.
  bool growSpan(BlockHeader* header, uint64_t bytes);
  // Returns a live, deferred or cached block of this pool to its class's free list (its pages to the OS, once
  // retired).
  void give(BlockHeader* header);

  // Decay (DESIGN.md, Residency), in a pool whose every block was carved on demand (the default classes; not
  // time-shared, not locked): a class's free list is a stack, so the blocks below the fewest it held free
  // during an epoch (its low-water mark) were not handed out once in that epoch. At the end of an epoch
  // those become due, and purgeDue() gives their pages back (MADV_DONTNEED) from the bottom of the stack
  // up: a class's list is its resident free blocks above its purged ones, and the purged are handed out
  // last. A block handed out in every epoch is never purged. The pool decides when an epoch ends.
  bool decays() const { return decays_; }
  // From now on decay and trim leave the span reserve's pages resident (PlanSpec::spanReserve). Until then
  // (the program's start-up: a model loaded, its passing buffers given back by a trim) they give it back
  // as any other span.
  void keepSpanReserve() { spans_.keep(); }
  void endDecayEpoch();
  bool hasDuePurges() const { return duePurges_; }
  // Whether decay could still give something back here: a free block of a purgeable class or a free span
  // that does not read as zero (the span reserve aside, once kept), or a purge due. False where it does not
  // decay.
  bool holdsIdle() const;
  // About the bytes decay could still give back here: the free blocks of purgeable classes not given back yet,
  // at their classes' capacity, and the free spans that do not read as zero (as holdsIdle(), without the
  // purges due). 0 where it does not decay.
  uint64_t idleBytes() const;
  // Bytes of given-back memory handed out again since the last call (a purged block or span served).
  uint64_t takeRewarmed() { return std::exchange(rewarmed_, 0); }
  // Bytes of memory given back for memory beside the pool (purgeSpanBytes) handed out again since the last call:
  // what rewarmed leaves out.
  uint64_t takeRewarmedBeside() { return std::exchange(rewarmedBeside_, 0); }
  // Purges at most `maxBlocks` due blocks, and past `maxBytes` of them no further class; adds the blocks and bytes given back to the counts (a block
  // never written since it was carved counts as purged without a system call, and in neither count).
  void purgeDue(uint64_t maxBlocks, uint64_t maxBytes, uint64_t* blocks, uint64_t* bytes);
  // Trim (malloc_trim): every free block of a purgeable size (as endDecayEpoch's: at least 4 pages) and every
  // free span gives its pages back now, whether due or not, as purgeDue() would once all were due; adds the
  // blocks and bytes given back to the counts. Pre: decays() (otherwise nothing changes). Post: no free block
  // or span of a purgeable size is resident (but those the kernel refused to take, and free spans within the
  // span reserve: PlanSpec::spanReserve), and no purge is due.
  void purgeAll(uint64_t* blocks, uint64_t* bytes);
  // The pool mapped `mappedBytes` for a block realloc moved out of an arena (or grew such a mapping): free
  // spans give back pages worth as much now, whether due or not, those freed in an epoch that ended first, so
  // that memory moved out of the arena is not held twice, in the mapping and in a free span waiting for decay.
  // Whole spans, at least one while the bytes last (a span may exceed them); adds the spans and bytes given
  // back to the counts. Nothing where the pool does not decay or has no spans.
  void purgeSpansFor(uint64_t mappedBytes, uint64_t* blocks, uint64_t* bytes);
  // Memory beside the pool grew by `wanted` bytes: free spans give back that much now, whatever decay says,
  // in purgeSpansFor's order, and no more (rounded up to kSpanFrom): whole spans while they fit, then the start
  // of the next, split off as a span that reads as zero (the rest keeps its epoch), so that a large free span a
  // program reuses every iteration is not given back whole for a little growth. Adds the spans and bytes given
  // back to the counts. Nothing where the pool does not decay or has no spans.
  void purgeSpanBytes(uint64_t wanted, uint64_t* blocks, uint64_t* bytes);
  // Block `header`, just given back, will not be wanted again soon (realloc moved its contents): its pages
  // go back now, and it joins the purged blocks. Only a block of a class, which only its class's requests
  // reuse (a chain of reallocs leaves one in every class it passes); a span's memory serves the next request
  // of any size, and stays. Returns whether pages were given back. Pre: give(header) was the last change to
  // its class.
  bool purgeGiven(BlockHeader* header);
  // This pool serves no more (a newer plan does): blocks that come back give their pages to the OS, so that
  // a draining arena holds memory only under live blocks. With discardFree the free blocks' pages go now;
  // without, the caller discards freeRanges() itself (Pool does it off its lock, as no retired block is
  // ever handed out again).
  void retire(bool discardFree);
  // The data of every free block no live block shares memory with: (start, bytes).
  std::vector<std::pair<char*, uint64_t>> freeRanges() const;
  // Adds this pool's live blocks and spans to `out` (pool_gauges.h), and with `free`, its free ones (the serving
  // classes': a retired pool's free pages go back as it retires). Defined in pool_gauges.cc.
  void addBySize(SizeBuckets* out, bool free) const;

  // The header of the block whose data starts at `data`, or nullptr when `data` is not the start of a block
  // of this pool. Never reads memory outside the arena.
  BlockHeader* headerOf(const void* data) const;

  uint32_t id() const { return id_; }
  const SizeClassTable& table() const { return table_; }
  const Schedules& schedules() const { return schedules_; }
  const std::vector<ClassCounters>& counters() const { return counters_; }
  const Arena& arena() const { return *arena_; }
  // Arena::releaseSpare on this pool's arena (the pool's lock held): it grows no further than that.
  uint64_t releaseSpare(uint64_t keepSpare) { return arena_->releaseSpare(keepSpare); }
  // Growth::Spans: the free spans at the arena's carved end (above the span reserve) are uncarved, so that
  // releaseSpare gives their address space back too: where the OS refused a request under an RLIMIT_AS, free
  // memory the pool holds must not be why (after a program freed its blocks, the largest one it can have is
  // glibc's). Their headers go; a later free() of a pointer there is no longer the pool's. Returns the bytes
  // uncarved (0 for other pools).
  uint64_t uncarveFreeTail();
  bool timeShared() const { return shared_; }
  uint64_t outstandingBlocks() const { return outstanding_; }  // live + deferred
  uint64_t grownBytes() const { return grownBytes_; }  // carved by growth so far (strides), never less
  static uint64_t strideOf(uint64_t classSize) { return kHeaderBytes + roundUp(classSize, kBlockAlign); }
  // Usable bytes of a block of class `cls` (after its header).
  uint64_t capacityOf(size_t cls) const { return strideOf(table_.size(cls)) - kHeaderBytes; }

 private:
  SizeClassPool() = default;
  static constexpr size_t kNearLenders = 4;  // Growth::BeforeBorrowing: one doubling of the default classes
  // Growth::Spans: a span of at least `bytes` for a request of class `cls`: the best free fit, else the free
  // span at the arena's end grown, else one carved; nullptr when the reservation is spent.
  BlockHeader* takeSpan(uint64_t bytes, size_t cls, Source* source);
  // Growth::Spans: span `header`, just given back, joins the free spans.
  void giveSpan(BlockHeader* header);
  // Growth::Spans: the headers of the spans starting at `starts` (those that have one) are no longer any
  // block's: headerOf() stops finding them now, and the next take or give of a span drops them (until then
  // a caller that gave one back may still read it).
  void markDeadSpanHeaders(char* const* starts, size_t count);
  void dropDeadSpanHeaders();
  // Gives the whole pages of [data, data + bytes) back and zeroes the range's own bytes in the pages it covers
  // only in part (never a byte outside it), so that the range reads as zero. False when the kernel refused
  // (the range then holds what it held).
  bool zeroRange(char* data, uint64_t bytes);
  // Growth::Spans: carves `bytes` (whole pages) as one free span (not pre-faulted) whose pages, once written,
  // decay and trim leave resident from keepSpanReserve() on (PlanSpec::spanReserve; SpanHeap::fenceAt).
  bool reserveSpan(uint64_t bytes, std::string* error);
  // Carves a block of class `cls`, pre-faulted when `commit` (what a plan names) or left to fault in.
  BlockHeader* carveBlock(size_t cls, bool commit, std::string* error);
  // Carves a block in class `cls` for a request it is (`own`) or is not the own class of; nullptr when the
  // reservation is spent.
  BlockHeader* grow(size_t cls, bool own, Source* source);
  // Growth::AfterBorrowing: whether a block of class `cls` may still be carved. A run that departs from its
  // plan grows; growth beyond kGrowthFactor x the peak outstanding bytes (plus kGrowthSlack) would serve
  // nothing a block already grown could not, so the request goes to the OS instead.
  bool growthAllowed(size_t cls) const;
  static constexpr uint64_t kGrowthFactor = 2;
  static constexpr uint64_t kGrowthSlack = uint64_t{64} << 20;
  // Counts a block becoming outstanding (live, deferred or cached) or coming back.
  void countOutstanding(uint64_t capacity);
  // purgeDue()'s work: the due blocks, and the free spans freed before epoch `spansBefore`, within the budgets.
  void purgeDueBefore(uint64_t spansBefore, uint64_t maxBlocks, uint64_t maxBytes, uint64_t* blocks, uint64_t* bytes);
  // Gives back the resident free spans freed before epoch `before`, in address order, until `maxSpans` of them
  // or `maxBytes` (idleSince's budgets); adds them to the counts. Returns whether a budget ran out.
  bool purgeSpansFreedBefore(uint64_t before, uint64_t maxSpans, uint64_t maxBytes, uint64_t* blocks, uint64_t* bytes);
  // Free span `span` (resident) gives its pages back and reads as zero; whether it did (the kernel may refuse).
  bool purgeFreeSpan(const SpanHeap::Span& span);
  // Decay: whether blocks of class `cls` are ever purged (a block of a few pages gives back little and would
  // be written whole to read as zero).
  bool purgeable(size_t cls) const;
  // Decay: gives the pages of free block `header` back and zeroes what stays resident of it, so that it
  // reads as zero (header->zero) when the kernel took the pages. False when nothing was given back (a
  // block never written since it was carved or purged, or the kernel refused).
  bool purge(BlockHeader* header);
  BlockHeader* markLive(BlockHeader* header, uint64_t bytes);
  // Time-shared pools: marks record r's block live for a request of `bytes`; returns whether it is lent.
  bool markRecordLive(uint32_t r, uint64_t bytes);
  // Marks a block just taken off a free list live and counts it as a hit or a loan.
  BlockHeader* takeFound(BlockHeader* header, uint64_t bytes, Source* source);
  // A block's state, owner's size and whether it is lent, for a request of `bytes`.
  void setLive(BlockHeader* header, uint64_t bytes) const;
  // Counts a block served off a free list (or again from a front cache) as a hit or a loan.
  Source countServed(const BlockHeader* header);
  Source countServed(size_t cls, bool lent);
  void push(size_t cls, BlockHeader* header);
  BlockHeader* pop(size_t cls);
  void setNonEmpty(size_t cls, bool nonEmpty);

  // Time-shared pools: one record per block; free lists link records by index. A block its schedule takes
  // stays on the list (taking it costs no unlinking) until a walk of the list meets it live.
  static constexpr uint32_t kNoRecord = UINT32_MAX;
  // Sharers of a record among records [64 * word, 64 * word + 64): one test of liveBits_ checks them all.
  struct SharerWord {
    uint64_t mask;
    uint32_t word;
  };
  // One cache line, which holds the first two words of its sharers as well: the take's availability check
  // then reads no other line but liveBits_ for most blocks (a block of a time-shared plan has few sharers),
  // where a separate array of words would cost every time-shared take a second line.
  struct alignas(64) Record {
    BlockHeader* header;     // where the block starts; its contents are valid only while the block is live
    uint32_t classIndex;
    uint32_t prev = kNoRecord, next = kNoRecord;  // free list links, while listed
    uint32_t sharersBegin = 0, sharersEnd = 0;    // its sharers' words beyond the near ones, in sharerWords_
    bool listed = false;                          // on its class's free list (free, or taken since)
    SharerWord near[2] = {{0, 0}, {0, 0}};        // its sharers' first words (an empty mask where none)
  };
  // Calls f(s) for every record s sharing memory with `record`.
  template <typename F>
  void forEachSharer(const Record& record, F f) const {
    const auto each = [&](const SharerWord& w) {
      for (uint64_t bits = w.mask; bits; bits &= bits - 1) f(w.word * 64 + static_cast<uint32_t>(__builtin_ctzll(bits)));
    };
    for (const SharerWord& w : record.near) each(w);
    for (uint32_t i = record.sharersBegin; i < record.sharersEnd; ++i) each(sharerWords_[i]);
  }
  bool isLive(uint32_t record) const { return (liveBits_[record / 64] >> (record % 64)) & 1; }
  void setLiveBit(uint32_t record, bool live);
  // Free, and no block sharing its memory is live.
  bool available(uint32_t record) const;
  // The first available block on one of class `cls`'s free lists within a few steps, taken off it; else
  // kNoRecord. `grown`: the list of blocks carved past the layout, which no schedule names.
  uint32_t takeAvailable(size_t cls, bool grown = false);
  // The free list record `record` belongs on: its class's list of layout blocks, or of grown ones.
  uint32_t& listHead(uint32_t record) { return (record < layoutBlocks_ ? recordHeads_ : grownHeads_)[records_[record].classIndex]; }
  // Counts a free block of a time-shared class taken.
  void countTakenShared(size_t cls);
  // Time-shared pools: block `record`, of class `cls`, is free (push for a block whose header may not be
  // written; its caller has the class at hand, from the header of the block it frees).
  void pushRecord(uint32_t record, size_t cls);
  bool placeLayout(const PlanSpec& plan, uint64_t height, std::string* error);
  uint32_t addRecord(BlockHeader* header, size_t cls);
  void link(uint32_t record);
  void unlink(uint32_t record);
  // Writes every field of the header of a block of class `cls` (`record`: its record in a time-shared pool),
  // each in place and once: a header zeroed first is written twice, and one built in a temporary and copied
  // stalls on store forwarding (both measured on the time-shared take). `requested` 0 for a free block.
  // Returns whether the block is lent (its `lent` field).
  bool writeHeader(BlockHeader* header, size_t cls, uint32_t record, BlockState state, uint64_t requested) const;
  // First class >= from with a free block, or -1.
  int firstNonEmpty(size_t from) const;

  uint32_t id_ = 0;
  uint64_t secret_ = 0;
  Growth growth_ = Growth::Off;
  bool retired_ = false;
  bool shared_ = false;  // the plan placed its blocks (a layout): they may share memory
  SizeClassTable table_;
  Schedules schedules_;
  std::unique_ptr<Arena> arena_;
  std::vector<BlockHeader*> heads_;       // free list per class
  std::vector<Record> records_;           // time-shared pools only: the layout's blocks, then those grown
  uint32_t layoutBlocks_ = 0;             // records [0, layoutBlocks_) are the layout's
  std::vector<uint64_t> liveBits_;        // bit per record: live or deferred
  std::vector<SharerWord> sharerWords_;   // per record, the records whose memory intersects its own (beyond near)
  std::vector<uint32_t> recordHeads_;     // time-shared pools: free list of layout records per class
  std::vector<uint32_t> grownHeads_;      // time-shared pools: free list of grown records per class
  std::vector<uint64_t> nonEmpty_;        // bit per class: it has a free block
  std::vector<ClassCounters> counters_;
  uint64_t outstanding_ = 0;
  uint64_t outstandingBytes_ = 0, peakOutstandingBytes_ = 0;  // capacity of the outstanding blocks, and its peak
  uint64_t grownBytes_ = 0;                                   // carved by growth (strides)
  // Decay, per class: the bottom `purged` blocks of the free list gave their pages back; of the resident
  // ones above them (free - purged), `lowWater` is the fewest held during this epoch, and the bottom `due`
  // are waiting for purgeDue().
  struct DecayState {
    uint64_t purged = 0, lowWater = 0, due = 0;
  };
  bool decays_ = false;
  bool duePurges_ = false;
  // Growth::Spans: the free spans; a span freed in epoch spanEpoch_ is due once an epoch ends after the
  // one it was freed in (spans freed before spanDueBefore_).
  SpanHeap spans_{kSpanFrom};  // a span below kSpanFrom reads as zero: pages skipped between carved spans
  // Growth::Spans: the spans' headers, out of line (header.h), by where the span starts: every live span's,
  // and every free one's that does not read as zero (a second free() of it finds a free block: a double
  // free, as with a header inside the block). A header never moves while it is indexed, and a free() finds
  // it in constant time however many spans there are.
  SpanHeaders spanHeaders_;
  std::vector<uintptr_t> deadSpanHeaders_;  // markDeadSpanHeaders(), not dropped yet
  uint64_t rewarmed_ = 0;  // takeRewarmed()
  // Bytes purgeSpanBytes gave back (memory beside the pool grew) not yet handed out again: what is handed out
  // of them is not counted in rewarmed_, which tells decay its period is too short, and decay did not give
  // them back. (Counted, a program whose C heap grew while it freed the pool's blocks kept its idle memory
  // for 2-4 decay periods more: the period doubled at the next epoch.)
  uint64_t givenBackBeside_ = 0;
  uint64_t rewarmedBeside_ = 0;  // takeRewarmedBeside()
  uint64_t spanEpoch_ = 0, spanDueBefore_ = 0;
  std::vector<DecayState> decay_;
  std::string lastGrowError_;  // why the last growth failed (reservation exhausted, or the OS refused pages)
};

}  // namespace tp

#include "core/size_class_pool.h"

#include <algorithm>
#include <new>
#include <cstring>

#include "os/os.h"

namespace tp {

// No pool is planned beyond 128 TiB: the x86-64 user address space.
constexpr uint64_t kMaxArenaBytes = uint64_t{1} << 47;

namespace {

// The plan with its layout's blocks renumbered in the order of their offsets (the schedule's block names
// follow). A block's record number is its layout index, and the blocks that share a block's memory are
// then mostly its neighbours in that order: their live bits fall into one or two words, where the order of
// training scattered them (a plan over six shapes of the OCR model: 5.6 words a block on average as
// trained, 2.3 by offset).
PlanSpec withLayoutInOffsetOrder(const PlanSpec& plan) {
  const size_t count = plan.layout.size();
  std::vector<uint32_t> byOffset(count);
  for (uint32_t b = 0; b < count; ++b) byOffset[b] = b;
  std::stable_sort(byOffset.begin(), byOffset.end(),
                   [&](uint32_t a, uint32_t b) { return plan.layout[a].offset < plan.layout[b].offset; });
  PlanSpec ordered = plan;
  std::vector<uint32_t> renamed(count);
  for (uint32_t i = 0; i < count; ++i) {
    ordered.layout[i] = plan.layout[byOffset[i]];
    renamed[byOffset[i]] = i;
  }
  for (ScheduleEntry& entry : ordered.schedule) {
    if (entry.block != ScheduleEntry::kAnyBlock) entry.block = renamed[entry.block];  // checked: < count
  }
  return ordered;
}

}  // namespace

std::unique_ptr<SizeClassPool> SizeClassPool::create(uint32_t id, uint64_t secret, const PlanSpec& given,
                                                     const ArenaOptions& arenaOptions, Growth growth,
                                                     uint64_t extraReserve, std::string* error) {
  std::unique_ptr<SizeClassPool> pool(new SizeClassPool());
  if (!pool->table_.build(given, error)) return nullptr;  // validates the plan as given (its error names its blocks)
  PlanSpec ordered;
  const PlanSpec& plan = given.layout.empty() ? given : (ordered = withLayoutInOffsetOrder(given));

  uint64_t planned = 0;
  if (plan.layout.empty()) {
    for (const PlanClass& c : plan.classes) {
      const uint64_t stride = strideOf(c.size);
      if (c.blocks > (kMaxArenaBytes - planned) / stride) {
        *error = "the plan needs more than 128 TiB (class of " + std::to_string(c.size) + " bytes, " +
                 std::to_string(c.blocks) + " blocks)";
        return nullptr;
      }
      planned += stride * c.blocks;
    }
  } else {
    // Offsets and class sizes were bounded by the table (< 2^47 and <= 2^40): no sum overflows.
    for (const PlacedBlock& block : plan.layout) {
      planned = std::max(planned, block.offset + strideOf(pool->table_.size(block.classIndex)));
    }
    if (planned > kMaxArenaBytes) {
      *error = "the plan's layout reaches beyond 128 TiB";
      return nullptr;
    }
  }
  const uint64_t extra = growth != Growth::Off ? extraReserve : 0;
  if (extra > kMaxArenaBytes - planned) {
    *error = "the reservation exceeds 128 TiB";
    return nullptr;
  }
  const uint64_t spanReserve = growth == Growth::Spans ? roundUp(plan.spanReserve, os::pageSize()) : 0;
  if (spanReserve > extra) {
    *error = "the plan's span reserve (" + std::to_string(spanReserve) + " bytes) is larger than the room to grow (" +
             std::to_string(extra) + " bytes)";
    return nullptr;
  }

  pool->id_ = id;
  pool->secret_ = secret;
  pool->schedules_ = Schedules(plan);
  pool->growth_ = growth;
  pool->shared_ = !plan.layout.empty();
  pool->arena_ = Arena::create(planned + extra, planned, arenaOptions, error);
  if (!pool->arena_) return nullptr;

  const size_t classes = pool->table_.count();
  pool->heads_.assign(classes, nullptr);
  pool->recordHeads_.assign(classes, kNoRecord);
  pool->grownHeads_.assign(classes, kNoRecord);
  pool->nonEmpty_.assign((classes + 63) / 64, 0);
  pool->counters_.assign(classes, ClassCounters{});
  // Decay gives back only blocks carved on demand: what a plan names stays resident, and a locked arena's
  // pages stay by contract.
  pool->decays_ = !pool->shared_ && planned == 0 && growth != Growth::Off && !arenaOptions.lock;
  if (pool->decays_) pool->decay_.assign(classes, DecayState{});
  if (pool->shared_) {
    if (!pool->placeLayout(plan, planned, error)) return nullptr;
    return pool;
  }
  for (const PlanClass& c : plan.classes) {
    const size_t cls = static_cast<size_t>(pool->table_.firstFitting(c.size));
    for (uint64_t b = 0; b < c.blocks; ++b) {
      BlockHeader* header = pool->carveBlock(cls, true, error);
      if (!header) return nullptr;  // cannot happen: the arena was sized for every planned block
      pool->push(cls, header);
    }
  }
  if (spanReserve != 0 && !pool->reserveSpan(spanReserve, error)) return nullptr;
  return pool;
}

void SizeClassPool::setNonEmpty(size_t cls, bool nonEmpty) {
  const uint64_t bit = uint64_t{1} << (cls % 64);
  if (nonEmpty) nonEmpty_[cls / 64] |= bit; else nonEmpty_[cls / 64] &= ~bit;
}

bool SizeClassPool::writeHeader(BlockHeader* header, size_t cls, uint32_t record, BlockState state, uint64_t requested) const {
  const bool lent = requested != 0 && !table_.isOwn(cls, requested);
  header->check = secret_ ^ reinterpret_cast<uintptr_t>(header);
  header->origin = Origin::Arena;
  header->state = state;
  header->classIndex = static_cast<uint16_t>(cls);
  header->arenaId = id_;
  header->capacity = capacityOf(cls);
  header->requested = requested;
  header->serial = 0;
  header->next = nullptr;
  header->osLength = 0;
  header->lent = lent ? 1 : 0;
  header->zero = 0;
  header->slot = record;
  header->span = 0;
  return lent;
}

BlockHeader* SizeClassPool::carveBlock(size_t cls, bool commit, std::string* error) {
  char* start = arena_->carve(strideOf(table_.size(cls)), error, commit);
  if (!start) return nullptr;
  BlockHeader* header = reinterpret_cast<BlockHeader*>(start);
  writeHeader(header, cls, shared_ ? addRecord(header, cls) : 0, BlockState::Free, 0);
  // Fresh memory reads as zero; a time-shared block's may be another block's, so it is never said to.
  header->zero = shared_ ? 0 : 1;
  counters_[cls].blocks++;
  return header;
}

void SizeClassPool::push(size_t cls, BlockHeader* header) {
  if (shared_) return pushRecord(header->slot, cls);
  counters_[cls].freeBlocks++;
  setNonEmpty(cls, true);
  header->next = heads_[cls];
  heads_[cls] = header;
}

BlockHeader* SizeClassPool::pop(size_t cls) {
  if (shared_) {
    const uint32_t r = takeAvailable(cls);
    return r == kNoRecord ? nullptr : records_[r].header;
  }
  if (decays_) {
    DecayState& d = decay_[cls];
    const uint64_t resident = counters_[cls].freeBlocks - d.purged;
    if (resident == 0) {
      d.purged--;  // the top of the list is the top of the purged blocks
      rewarmed_ += capacityOf(cls);
    } else {
      d.lowWater = std::min(d.lowWater, resident - 1);
      d.due = std::min(d.due, resident - 1);
    }
  }
  counters_[cls].freeBlocks--;
  BlockHeader* header = heads_[cls];
  heads_[cls] = header->next;
  header->next = nullptr;
  if (!heads_[cls]) setNonEmpty(cls, false);
  return header;
}

int SizeClassPool::firstNonEmpty(size_t from) const {
  for (size_t word = from / 64; word < nonEmpty_.size(); ++word) {
    uint64_t bits = nonEmpty_[word];
    if (word == from / 64) bits &= ~uint64_t{0} << (from % 64);
    if (bits) return static_cast<int>(word * 64 + static_cast<size_t>(__builtin_ctzll(bits)));
  }
  return -1;
}

BlockHeader* SizeClassPool::take(uint64_t bytes, Source* source) {
  const int home = table_.firstFitting(bytes);
  if (home < 0) return nullptr;
  const size_t first = static_cast<size_t>(home);
  const bool ownExists = table_.isOwn(first, bytes);
  if (growth_ == Growth::Spans && bytes >= kSpanFrom) return takeSpan(bytes, first, source);

  if (shared_ && growth_ != Growth::Off) {
    // On a block of the layout, an allocation the schedule did not place makes the scheduled blocks that
    // share its memory busy for as long as it lives: one that lives on from start-up (a stray, or a weight
    // displaced by one) costs every later iteration its schedule, whose displaced tensors go on to take
    // other tensors' blocks.
    // A request of no class's own size, or one whose class has no grown block free, takes a grown block of
    // a near class before it grows another: without this, a run of sizes the plan never saw would grow a
    // block per request.
    for (size_t cls = first; cls <= first + kNearLenders && cls < table_.count(); ++cls) {
      if (!hasFree(cls)) continue;
      const uint32_t r = takeAvailable(cls, true);
      if (r != kNoRecord) return takeFound(records_[r].header, bytes, source);
    }
    if (BlockHeader* header = grow(first, ownExists, source)) return markLive(header, bytes);
  }
  if (ownExists && hasFree(first)) {
    if (BlockHeader* header = pop(first)) {
      counters_[first].hits++;
      *source = Source::Own;
      return markLive(header, bytes);
    }
    counters_[first].busy++;  // time-shared: its free blocks lie under live ones
  }
  const bool growFirst = ownExists && (growth_ == Growth::BeforeBorrowing || growth_ == Growth::Spans);
  if (growFirst) {
    for (size_t lender = first + 1; lender <= first + kNearLenders && lender < table_.count(); ++lender) {
      if (!hasFree(lender)) continue;
      if (BlockHeader* header = pop(lender)) {
        counters_[lender].lent++;
        *source = Source::Borrowed;
        return markLive(header, bytes);
      }
    }
    if (BlockHeader* header = grow(first, true, source)) return markLive(header, bytes);
  }
  if (growth_ == Growth::AfterBorrowing && ownExists) {
    // A plan's request of a size it laid out blocks for, all of them held (a buffer a garbage collector frees
    // late holds one): a block up to twice its class's size before its class grows, a farther one only when
    // it cannot grow. Else it takes a block the plan laid out for a much larger tensor, whose request then grows
    // one that large instead, faulted in on every run. A request of no size of the plan borrows as training
    // laid it out.
    for (int lender = firstNonEmpty(first + 1); lender >= 0 && table_.size(lender) <= 2 * table_.size(first);
         lender = firstNonEmpty(static_cast<size_t>(lender) + 1)) {
      if (BlockHeader* header = pop(static_cast<size_t>(lender))) return takeFound(header, bytes, source);
    }
    if (BlockHeader* header = grow(first, true, source)) return markLive(header, bytes);
  }
  for (int lender = firstNonEmpty(ownExists ? first + 1 : first); lender >= 0;
       lender = firstNonEmpty(static_cast<size_t>(lender) + 1)) {
    BlockHeader* header = pop(static_cast<size_t>(lender));
    if (!header) continue;  // time-shared: busy, try the next larger class
    counters_[lender].lent++;
    *source = Source::Borrowed;
    return markLive(header, bytes);
  }
  // Nothing free fits. (Growing before this, a class with no own class would grow while a block of the
  // smallest fitting class lay free: without bound.)
  if (growth_ != Growth::Off && !growFirst) {
    if (BlockHeader* header = grow(first, ownExists, source)) return markLive(header, bytes);
  }
  return nullptr;
}

bool SizeClassPool::growthAllowed(size_t cls) const {
  if (growth_ != Growth::AfterBorrowing) return true;  // the default classes: decay bounds what they hold
  const uint64_t peak = std::max(peakOutstandingBytes_, outstandingBytes_ + capacityOf(cls));
  return grownBytes_ + strideOf(table_.size(cls)) <= kGrowthFactor * peak + kGrowthSlack;
}

BlockHeader* SizeClassPool::grow(size_t cls, bool own, Source* source) {
  if (!growthAllowed(cls)) {
    lastGrowError_ = "growth bound reached";
    return nullptr;
  }
  // Carved without pre-faulting: a block grown on demand becomes resident where it is written.
  BlockHeader* header = carveBlock(cls, false, &lastGrowError_);
  if (!header) return nullptr;
  grownBytes_ += strideOf(table_.size(cls));
  counters_[cls].grown++;
  if (own) counters_[cls].hits++; else counters_[cls].lent++;
  *source = own ? Source::Grown : Source::GrownLent;
  return header;
}

BlockHeader* SizeClassPool::takeFrom(size_t cls, uint64_t bytes, Source* source) {
  if (!hasFree(cls)) return nullptr;
  BlockHeader* header = pop(cls);
  if (!header) {
    counters_[cls].busy++;
    return nullptr;
  }
  return takeFound(header, bytes, source);
}

BlockHeader* SizeClassPool::takeFound(BlockHeader* header, uint64_t bytes, Source* source) {
  header = markLive(header, bytes);
  *source = countServed(header);
  return header;
}

Source SizeClassPool::countServed(const BlockHeader* header) { return countServed(header->classIndex, header->lent != 0); }

Source SizeClassPool::countServed(size_t cls, bool lent) {
  if (lent) {
    counters_[cls].lent++;
    return Source::Borrowed;
  }
  counters_[cls].hits++;
  return Source::Own;
}

void SizeClassPool::setLive(BlockHeader* header, uint64_t bytes) const {
  header->state = BlockState::Live;
  header->requested = bytes;
  header->lent = table_.isOwn(header->classIndex, bytes) ? 0 : 1;
}

void SizeClassPool::cache(BlockHeader* header) {
  header->state = BlockState::Cached;
  header->zero = 0;
  counters_[header->classIndex].cached++;
}

Source SizeClassPool::reuse(BlockHeader* header, uint64_t bytes) {
  counters_[header->classIndex].cached--;
  setLive(header, bytes);
  return countServed(header);
}

BlockHeader* SizeClassPool::markLive(BlockHeader* header, uint64_t bytes) {
  if (shared_) {
    markRecordLive(header->slot, bytes);  // the taker set its slot
    return header;
  }
  setLive(header, bytes);
  outstanding_++;
  countOutstanding(header->capacity);
  return header;
}

void SizeClassPool::give(BlockHeader* header) {
  if (header->state == BlockState::Cached) counters_[header->classIndex].cached--;
  header->state = BlockState::Free;
  header->requested = 0;
  header->lent = 0;
  header->zero = 0;  // its owner may have written it
  outstanding_--;
  outstandingBytes_ -= header->capacity;
  if (retired_) {
    arena_->discard(header->data(), header->capacity);
    // Sharers freed while this block was live kept their pages (retire() skipped them): now they can go.
    if (shared_) {
      const Record& record = records_[header->slot];
      setLiveBit(header->slot, false);
      forEachSharer(record, [&](uint32_t s) {
        if (available(s)) arena_->discard(records_[s].header->data(), capacityOf(records_[s].classIndex));
      });
    }
  }
  if (header->span) return giveSpan(header);
  push(header->classIndex, header);
}

void SizeClassPool::countOutstanding(uint64_t capacity) {
  outstandingBytes_ += capacity;
  peakOutstandingBytes_ = std::max(peakOutstandingBytes_, outstandingBytes_);
}

void SizeClassPool::retire(bool discardFree) {
  retired_ = true;
  if (!discardFree) return;
  for (const auto& [start, bytes] : freeRanges()) arena_->discard(start, bytes);
}

std::vector<std::pair<char*, uint64_t>> SizeClassPool::freeRanges() const {
  std::vector<std::pair<char*, uint64_t>> ranges;
  if (shared_) {
    for (uint32_t r = 0; r < records_.size(); ++r) {
      if (!available(r)) continue;
      ranges.emplace_back(records_[r].header->data(), capacityOf(records_[r].classIndex));
    }
    return ranges;
  }
  for (BlockHeader* head : heads_) {
    for (BlockHeader* header = head; header; header = header->next) ranges.emplace_back(header->data(), header->capacity);
  }
  for (const SpanHeap::Span& span : spans_.spans()) ranges.emplace_back(span.start, span.bytes);
  return ranges;
}

BlockHeader* SizeClassPool::headerOf(const void* data) const {
  const uintptr_t at = reinterpret_cast<uintptr_t>(data);
  const uintptr_t base = reinterpret_cast<uintptr_t>(arena_->base());
  if (!arena_->contains(data)) return nullptr;
  if (BlockHeader* span = spanHeaders_.find(at); span && span->check == (secret_ ^ reinterpret_cast<uintptr_t>(span))) return span;
  if (at - base < kHeaderBytes || (at - base) % kBlockAlign != 0) return nullptr;
  BlockHeader* header = reinterpret_cast<BlockHeader*>(at - kHeaderBytes);
  if (header->check != (secret_ ^ reinterpret_cast<uintptr_t>(header))) return nullptr;
  if (!shared_) return header;
  // A time-shared block's header is trusted only when its record agrees: the header of a free block may be
  // stale (written by a block that is no longer live at this address).
  if (header->slot >= records_.size() || records_[header->slot].header != header) return nullptr;
  const bool live = header->state != BlockState::Free;
  return isLive(header->slot) == live ? header : nullptr;
}

}  // namespace tp

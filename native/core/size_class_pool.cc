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

bool SizeClassPool::reserveSpan(uint64_t bytes, std::string* error) {
  // Not pre-faulted: a program need not write all of what it asks for (onnxruntime's buffers sized for the
  // largest shape), and pages it never writes must not be resident on its account.
  char* start = arena_->carve(bytes, error, false);
  if (!start) return false;
  char* absorbed[2];  // nothing is free beside it: nothing is absorbed
  try {
    spans_.give({start, bytes, true}, spanEpoch_, absorbed);
  } catch (const std::bad_alloc&) {
    *error = "no memory to index the span reserve";
    return false;
  }
  spans_.fenceAt(start + bytes);
  return true;
}

bool SizeClassPool::placeLayout(const PlanSpec& plan, uint64_t height, std::string* error) {
  char* base = arena_->carve(height, error);
  if (!base) return false;
  const size_t count = plan.layout.size();
  records_.reserve(count);
  for (const PlacedBlock& block : plan.layout) {
    addRecord(reinterpret_cast<BlockHeader*>(base + block.offset), block.classIndex);
    counters_[block.classIndex].blocks++;
  }
  layoutBlocks_ = static_cast<uint32_t>(count);
  // Blocks sorted by offset: block i shares memory with the blocks after it that start before it ends.
  std::vector<uint32_t> byOffset(count);
  for (uint32_t i = 0; i < count; ++i) byOffset[i] = i;
  std::sort(byOffset.begin(), byOffset.end(),
            [&](uint32_t a, uint32_t b) { return plan.layout[a].offset < plan.layout[b].offset; });
  std::vector<std::vector<uint32_t>> sharing(count);
  for (size_t i = 0; i < count; ++i) {
    const uint32_t a = byOffset[i];
    const uint64_t end = plan.layout[a].offset + strideOf(table_.size(plan.layout[a].classIndex));
    for (size_t j = i + 1; j < count && plan.layout[byOffset[j]].offset < end; ++j) {
      sharing[a].push_back(byOffset[j]);
      sharing[byOffset[j]].push_back(a);
    }
  }
  for (uint32_t r = 0; r < count; ++r) {
    std::sort(sharing[r].begin(), sharing[r].end());
    std::vector<SharerWord> words;
    for (uint32_t sharer : sharing[r]) {
      if (words.empty() || words.back().word != sharer / 64) words.push_back({0, sharer / 64});
      words.back().mask |= uint64_t{1} << (sharer % 64);
    }
    Record& record = records_[r];
    const size_t nearCount = std::min(words.size(), std::size(record.near));
    std::copy(words.begin(), words.begin() + nearCount, record.near);
    record.sharersBegin = static_cast<uint32_t>(sharerWords_.size());
    sharerWords_.insert(sharerWords_.end(), words.begin() + nearCount, words.end());
    record.sharersEnd = static_cast<uint32_t>(sharerWords_.size());
    pushRecord(r, record.classIndex);
  }
  schedules_.markKeeps(sharing);
  return true;
}

uint32_t SizeClassPool::addRecord(BlockHeader* header, size_t cls) {
  Record record;
  record.header = header;
  record.classIndex = static_cast<uint32_t>(cls);
  record.sharersBegin = record.sharersEnd = static_cast<uint32_t>(sharerWords_.size());
  records_.push_back(record);
  const uint32_t r = static_cast<uint32_t>(records_.size() - 1);
  liveBits_.resize(r / 64 + 1, 0);
  setLiveBit(r, true);  // a block is carved to be handed out, or pushed free by its creator
  return r;
}

void SizeClassPool::setLiveBit(uint32_t r, bool live) {
  const uint64_t bit = uint64_t{1} << (r % 64);
  if (live) liveBits_[r / 64] |= bit; else liveBits_[r / 64] &= ~bit;
}

bool SizeClassPool::available(uint32_t r) const {
  if (isLive(r)) return false;
  const Record& record = records_[r];
  // The near words are tested unconditionally: an unused one has an empty mask.
  if ((liveBits_[record.near[0].word] & record.near[0].mask) | (liveBits_[record.near[1].word] & record.near[1].mask)) {
    return false;
  }
  for (uint32_t i = record.sharersBegin; i < record.sharersEnd; ++i) {
    if (liveBits_[sharerWords_[i].word] & sharerWords_[i].mask) return false;
  }
  return true;
}

void SizeClassPool::countTakenShared(size_t cls) {
  if (--counters_[cls].freeBlocks == 0) setNonEmpty(cls, false);
}

uint32_t SizeClassPool::takeAvailable(size_t cls, bool grown) {
  // Bounded: a class whose first free blocks all lie under live ones is treated as busy, not searched.
  constexpr int kSteps = 8;
  uint32_t r = (grown ? grownHeads_ : recordHeads_)[cls];
  for (int step = 0; r != kNoRecord && step < kSteps;) {
    const uint32_t next = records_[r].next;
    if (isLive(r)) {
      unlink(r);  // taken by its schedule since it was listed
    } else if (available(r)) {
      unlink(r);
      countTakenShared(cls);
      records_[r].header->slot = r;  // an available block's memory is no one's: its header may be written
      return r;
    } else {
      ++step;
    }
    r = next;
  }
  return kNoRecord;
}

void SizeClassPool::setNonEmpty(size_t cls, bool nonEmpty) {
  const uint64_t bit = uint64_t{1} << (cls % 64);
  if (nonEmpty) nonEmpty_[cls / 64] |= bit; else nonEmpty_[cls / 64] &= ~bit;
}

void SizeClassPool::link(uint32_t r) {
  Record& record = records_[r];
  uint32_t& head = listHead(r);
  record.prev = kNoRecord;
  record.next = head;
  record.listed = true;
  if (head != kNoRecord) records_[head].prev = r;
  head = r;
}

void SizeClassPool::unlink(uint32_t r) {
  Record& record = records_[r];
  uint32_t& head = listHead(r);
  if (record.prev != kNoRecord) records_[record.prev].next = record.next; else head = record.next;
  if (record.next != kNoRecord) records_[record.next].prev = record.prev;
  record.prev = record.next = kNoRecord;
  record.listed = false;
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

void SizeClassPool::pushRecord(uint32_t r, size_t cls) {
  counters_[cls].freeBlocks++;
  setNonEmpty(cls, true);
  setLiveBit(r, false);
  if (!records_[r].listed) link(r);  // still listed when its schedule took it and no walk came by since
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
    // a near class before it grows another: without this, a run of sizes the plan never saw grew a block
    // per request (a time-shared plan under random sizes, 5,509 blocks, 10.4 GB).
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
    // one that large instead (examples/process/app.mjs: 3.2 MiB faulted in per run for each 600 KiB input
    // held). A request of no size of the plan borrows as training laid it out.
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

BlockHeader* SizeClassPool::takeSpan(uint64_t bytes, size_t cls, Source* source) {
  dropDeadSpanHeaders();
  const uint64_t stride = roundUp(bytes, kBlockAlign);  // its header is out of line: the span holds data alone
  SpanHeap::Span span;
  std::vector<char*> absorbed;
  const bool found = spans_.takeBestFit(stride, kSpanFrom, &span, &absorbed);
  if (!found) {
    // Nothing free is large enough: the free spans at the arena's end grow into the reservation (memory
    // already given to the pool), else a span is carved. Not pre-faulted: it faults in where written.
    const char* end = arena_->base() + arena_->carvedBytes();
    SpanHeap::Span last;
    const bool extend = spans_.takeEndingAt(end, &last, &absorbed);
    const uint64_t more = extend ? stride - last.bytes : stride;  // smaller than the request: no best fit
    // A span carved anew starts on a page of its own, one untouched page after what was carved before it, if
    // anything was (address space only: never written, never resident). A large block then shares no page with the
    // small blocks carved before it, as glibc's mapped chunks and other allocators' large extents share
    // none: a program that maps over, protects or gives back the pages around its own buffer (glibc's
    // tst-free-errno maps over the page before and after its 16 MiB block) cannot reach another block.
    const uint64_t carvedNow = arena_->carvedBytes(), page = os::pageSize();
    const uint64_t gap = extend || carvedNow == 0 ? 0 : roundUp(carvedNow, page) - carvedNow + page;
    char* carved = arena_->carve(gap + more, &lastGrowError_, false);
    if (carved && gap != 0) {
      // The skipped pages are a free span that reads as zero: taken by no request alone (smaller than any),
      // they merge with the spans beside them as those are freed, so spans carved apart still coalesce.
      char* absorbedByGap[2];
      try {
        const int n = spans_.give({carved, gap, true}, spanEpoch_, absorbedByGap);
        markDeadSpanHeaders(absorbedByGap, static_cast<size_t>(n));
      } catch (const std::bad_alloc&) {
        // not indexed: those pages stay unused (address space only)
      }
      carved += gap;
    }
    if (!carved) {
      char* merged[2];
      if (extend) spans_.give(last, spanEpoch_, merged);  // as one span: nothing free is beside it
      markDeadSpanHeaders(absorbed.data(), absorbed.size());
      return nullptr;
    }
    span = extend ? SpanHeap::Span{last.start, stride, last.zero} : SpanHeap::Span{carved, stride, true};
    grownBytes_ += more;
  }
  // The starts inside the span taken that were spans' own are no longer: their headers go.
  markDeadSpanHeaders(absorbed.data(), absorbed.size());
  dropDeadSpanHeaders();
  BlockHeader* header;
  try {
    header = spanHeaders_.obtain(reinterpret_cast<uintptr_t>(span.start));
  } catch (const std::bad_alloc&) {
    char* merged[2];
    try {
      markDeadSpanHeaders(merged, static_cast<size_t>(spans_.give(span, spanEpoch_, merged)));
    } catch (const std::bad_alloc&) {
      // not indexed: the span is lost to the heap (never handed out again)
    }
    return nullptr;
  }
  // A free span reads as zero only once purged, or in the span reserve before its first use (not memory
  // given back, so not counted).
  if (found && span.zero && !spans_.kept(span.start)) {
    const uint64_t beside = std::min(givenBackBeside_, span.bytes);
    givenBackBeside_ -= beside;
    rewarmed_ += span.bytes - beside;
  }
  writeHeader(header, cls, 0, BlockState::Free, 0);
  header->capacity = span.bytes;
  header->span = 1;
  header->spanData = span.start;
  header->zero = span.zero ? 1 : 0;
  counters_[cls].hits++;
  if (!found) counters_[cls].grown++;
  *source = found ? Source::Own : Source::Grown;
  return markLive(header, bytes);
}

uint64_t SizeClassPool::uncarveFreeTail() {
  if (growth_ != Growth::Spans || arena_->committedBytes() != 0) return 0;
  dropDeadSpanHeaders();
  const char* end = arena_->base() + arena_->carvedBytes();
  SpanHeap::Span tail;
  std::vector<char*> absorbed;
  if (!spans_.takeEndingAt(end, &tail, &absorbed)) return 0;
  char* merged[2];
  if (reinterpret_cast<uintptr_t>(tail.start) < spans_.fence()) {  // the span reserve stays carved
    markDeadSpanHeaders(absorbed.data(), absorbed.size());
    markDeadSpanHeaders(merged, static_cast<size_t>(spans_.give(tail, spanEpoch_, merged)));
    return 0;
  }
  absorbed.push_back(tail.start);
  markDeadSpanHeaders(absorbed.data(), absorbed.size());
  dropDeadSpanHeaders();
  arena_->uncarve(tail.bytes);
  return tail.bytes;
}

void SizeClassPool::markDeadSpanHeaders(char* const* starts, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    BlockHeader* header = spanHeaders_.find(reinterpret_cast<uintptr_t>(starts[i]));
    if (!header) continue;
    header->check = 0;  // headerOf() no longer finds it
    try {
      deadSpanHeaders_.push_back(reinterpret_cast<uintptr_t>(starts[i]));
    } catch (const std::bad_alloc&) {
      // stays in the index, found by no lookup, until a span starts there again and takes it over
    }
  }
}

void SizeClassPool::dropDeadSpanHeaders() {
  for (const uintptr_t start : deadSpanHeaders_) {
    const BlockHeader* header = spanHeaders_.find(start);
    if (!header || header->check != 0) continue;
    spanHeaders_.erase(start);
  }
  deadSpanHeaders_.clear();
}

bool SizeClassPool::growSpan(BlockHeader* header, uint64_t bytes) {
  if (retired_ || bytes > table_.largest()) return false;
  const uint64_t capacity = roundUp(bytes, kBlockAlign);
  char* end = header->data() + header->capacity;
  const uint64_t more = capacity - header->capacity;
  SpanHeap::Span next;
  std::vector<char*> absorbed;
  const uint64_t freeAfter = spans_.bytesAt(end);
  if (freeAfter >= more) {
    spans_.takeAt(end, more, kSpanFrom, &next, &absorbed);
  } else if (end + freeAfter == arena_->base() + arena_->carvedBytes() && arena_->carve(more - freeAfter, &lastGrowError_, false)) {
    // What is free after it runs to the arena's end: that, and the spare reservation beyond.
    if (freeAfter) spans_.takeAt(end, freeAfter, 0, &next, &absorbed);
    next.bytes = more;
    grownBytes_ += more - freeAfter;
  } else {
    return false;
  }
  // The spans' starts there are inside this block now.
  if (freeAfter) markDeadSpanHeaders(&end, 1);
  markDeadSpanHeaders(absorbed.data(), absorbed.size());
  header->capacity += next.bytes;
  countOutstanding(next.bytes);
  return true;
}

void SizeClassPool::giveSpan(BlockHeader* header) {
  // A retired pool hands nothing out again (give() gave the pages back): its free spans are not tracked, so
  // that nothing writes into memory a discard of freeRanges() may be giving back off the lock.
  if (retired_) return;
  dropDeadSpanHeaders();
  char* absorbed[2];
  int n;
  try {
    n = spans_.give({header->data(), header->capacity, false}, spanEpoch_, absorbed);
  } catch (const std::bad_alloc&) {
    // free() must not fail where the C library can give the heap's index no node (a program near its
    // RLIMIT_AS): the span stays out of the heap, never handed out again, its header saying Free.
    return;
  }
  // A span merged into the free span before it is no block's: it must not pass headerOf(). (Its header, which
  // may be `header` itself, is dropped at the next take or give: the caller may still read it, purgeGiven.)
  markDeadSpanHeaders(absorbed, static_cast<size_t>(n));
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

int SizeClassPool::cachedBlocking(uint32_t block) const {
  // A live block's header is intact: no other block's data covers it while it is live.
  const auto cached = [&](uint32_t r) { return isLive(r) && records_[r].header->state == BlockState::Cached; };
  if (isLive(block)) return cached(block) ? static_cast<int>(records_[block].classIndex) : -1;
  int smallest = -1;
  forEachSharer(records_[block], [&](uint32_t s) {
    if (cached(s) && (smallest < 0 || records_[s].classIndex < static_cast<uint32_t>(smallest))) smallest = static_cast<int>(records_[s].classIndex);
  });
  return smallest;
}

BlockHeader* SizeClassPool::takeBlock(uint32_t block, uint64_t bytes, Source* source) {
  if (isLive(block)) return nullptr;
  const Record& record = records_[block];
  const size_t cls = record.classIndex;
  if (!available(block)) {
    counters_[cls].busy++;
    return nullptr;
  }
  countTakenShared(cls);  // it stays listed: a walk of the list unlinks it if still live
  *source = countServed(cls, markRecordLive(block, bytes));
  return record.header;
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

bool SizeClassPool::markRecordLive(uint32_t r, uint64_t bytes) {
  // Written whole from what the record holds, never read back: the header may have been another block's
  // data while it was free, and a load from its line would wait for that line.
  const bool lent = writeHeader(records_[r].header, records_[r].classIndex, r, BlockState::Live, bytes);
  setLiveBit(r, true);
  outstanding_++;
  countOutstanding(capacityOf(records_[r].classIndex));
  return lent;
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

void SizeClassPool::endDecayEpoch() {
  duePurges_ = false;
  for (size_t cls = 0; cls < decay_.size(); ++cls) {
    DecayState& d = decay_[cls];
    const uint64_t resident = counters_[cls].freeBlocks - d.purged;
    // The bottom `lowWater` resident blocks were not handed out during the epoch (those due before among them).
    d.due = purgeable(cls) ? d.lowWater : 0;
    d.lowWater = resident;
    duePurges_ = duePurges_ || d.due != 0;
  }
  if (growth_ == Growth::Spans) {
    spanDueBefore_ = spanEpoch_++;
    duePurges_ = duePurges_ || spans_.count() != 0;  // purgeDue() looks which are idle
  }
}

bool SizeClassPool::holdsIdle() const {
  if (!decays_ || retired_) return false;
  if (duePurges_ || (growth_ == Growth::Spans && spans_.idleResidentBytes() != 0)) return true;
  for (size_t cls = 0; cls < decay_.size(); ++cls) {
    if (counters_[cls].freeBlocks > decay_[cls].purged && purgeable(cls)) return true;
  }
  return false;
}

uint64_t SizeClassPool::idleBytes() const {
  if (!decays_ || retired_) return 0;
  uint64_t bytes = growth_ == Growth::Spans ? spans_.idleResidentBytes() : 0;
  for (size_t cls = 0; cls < decay_.size(); ++cls) {
    if (counters_[cls].freeBlocks > decay_[cls].purged && purgeable(cls)) {
      bytes += (counters_[cls].freeBlocks - decay_[cls].purged) * capacityOf(cls);
    }
  }
  return bytes;
}

void SizeClassPool::purgeDue(uint64_t maxBlocks, uint64_t maxBytes, uint64_t* blocks, uint64_t* bytes) {
  purgeDueBefore(spanDueBefore_, maxBlocks, maxBytes, blocks, bytes);
}

void SizeClassPool::purgeAll(uint64_t* blocks, uint64_t* bytes) {
  if (!decays_ || retired_) return;
  // Every resident free block is due, and every span was freed before an epoch that never comes.
  for (size_t cls = 0; cls < decay_.size(); ++cls) {
    if (purgeable(cls)) decay_[cls].due = counters_[cls].freeBlocks - decay_[cls].purged;
  }
  purgeDueBefore(UINT64_MAX, UINT64_MAX, UINT64_MAX, blocks, bytes);
}

void SizeClassPool::purgeDueBefore(uint64_t spansBefore, uint64_t maxBlocks, uint64_t maxBytes, uint64_t* blocks, uint64_t* bytes) {
  uint64_t done = 0, doneBytes = 0;
  bool left = false;
  for (size_t cls = 0; cls < decay_.size(); ++cls) {
    DecayState& d = decay_[cls];
    if (d.due == 0) continue;
    // Within both budgets, and at least one block while the byte budget lasts (a class may exceed it).
    const uint64_t byBytes = doneBytes >= maxBytes ? 0 : std::max<uint64_t>(1, (maxBytes - doneBytes) / capacityOf(cls));
    const uint64_t n = std::min({d.due, maxBlocks - done, byBytes});
    if (n == 0) {
      left = true;
      continue;
    }
    // The n resident blocks just above the purged ones: below the (resident - n) nearer the top.
    const uint64_t resident = counters_[cls].freeBlocks - d.purged;
    BlockHeader* header = heads_[cls];
    for (uint64_t i = 0; i < resident - n; ++i) header = header->next;
    for (uint64_t i = 0; i < n; ++i, header = header->next) {
      if (!purge(header)) continue;
      *bytes += header->capacity;
      ++*blocks;
    }
    d.purged += n;
    d.due -= n;
    d.lowWater -= std::min(d.lowWater, n);
    done += n;
    doneBytes += n * capacityOf(cls);
    left = left || d.due != 0;
  }
  if (growth_ == Growth::Spans) {
    const uint64_t room = maxBlocks - done, roomBytes = doneBytes >= maxBytes ? 0 : maxBytes - doneBytes;
    // (The span reserve is not listed: it stays resident.)
    left = purgeSpansFreedBefore(spansBefore, room, roomBytes, blocks, bytes) || left;
  }
  duePurges_ = left;
}

bool SizeClassPool::purgeSpansFreedBefore(uint64_t before, uint64_t maxSpans, uint64_t maxBytes, uint64_t* blocks, uint64_t* bytes) {
  const std::vector<SpanHeap::Span> idle = maxSpans && maxBytes ? spans_.idleSince(before, maxSpans, maxBytes) : std::vector<SpanHeap::Span>{};
  uint64_t idleBytes = 0;
  for (const SpanHeap::Span& span : idle) {
    idleBytes += span.bytes;
    if (!purgeFreeSpan(span)) continue;
    *bytes += span.bytes;
    ++*blocks;
  }
  return idle.size() == maxSpans || idleBytes >= maxBytes;
}

bool SizeClassPool::purgeFreeSpan(const SpanHeap::Span& span) {
  if (!zeroRange(span.start, span.bytes)) return false;
  char* absorbed[2];
  const int n = spans_.markZero(span.start, absorbed);
  // Neither it nor the spans it merged with keep a header: a span that reads as zero has none.
  markDeadSpanHeaders(&span.start, 1);
  markDeadSpanHeaders(absorbed, static_cast<size_t>(n));
  return true;
}

void SizeClassPool::purgeSpanBytes(uint64_t wanted, uint64_t* blocks, uint64_t* bytes) {
  if (!decays_ || retired_ || growth_ != Growth::Spans) return;
  const uint64_t page = os::pageSize();
  uint64_t left = std::max(roundUp(wanted, page), kSpanFrom);
  const auto gaveBack = [&](uint64_t spanBytes) {
    givenBackBeside_ += spanBytes;
    *bytes += spanBytes;
    ++*blocks;
  };
  // Those decay would give back first (freed in an epoch that ended), then the rest, in address order. idleSince
  // lists spans until they hold `left`: only the last one listed can hold more than is left to give.
  for (const uint64_t before : {spanEpoch_, UINT64_MAX}) {
    for (const SpanHeap::Span& span : spans_.idleSince(before, UINT64_MAX, left)) {
      if (span.bytes <= left + kSpanFrom) {
        if (!purgeFreeSpan(span)) continue;
        gaveBack(span.bytes);
        left -= std::min(left, span.bytes);
        continue;
      }
      // Its first bytes split off (no header to move: headers live in spanHeaders_, not in the span), given back
      // and returned as a span that reads as zero; the rest stays free as it was, epoch and all. As many as are
      // left to give, in whole pages and at least kSpanFrom (also where the spans before gave back nearly all):
      // a span that reads as zero and is smaller merges with any neighbour (SpanHeap::give). That is less than
      // the span holds, as span.bytes > left + kSpanFrom.
      std::vector<char*> absorbed;
      SpanHeap::Span head;
      if (!spans_.takeAt(span.start, std::max(roundUp(left, page), kSpanFrom), 0, &head, &absorbed)) return;
      markDeadSpanHeaders(absorbed.data(), absorbed.size());
      head.zero = zeroRange(head.start, head.bytes);
      char* merged[2];
      markDeadSpanHeaders(merged, static_cast<size_t>(spans_.give(head, spanEpoch_, merged)));
      if (!head.zero) return;
      markDeadSpanHeaders(&head.start, 1);
      gaveBack(head.bytes);
      return;
    }
    if (left == 0) return;
  }
}

void SizeClassPool::purgeSpansFor(uint64_t mappedBytes, uint64_t* blocks, uint64_t* bytes) {
  if (!decays_ || retired_ || growth_ != Growth::Spans) return;
  const uint64_t before = *bytes;
  // Those decay would give back first (freed in an epoch that ended), then the rest, in address order.
  purgeSpansFreedBefore(spanEpoch_, UINT64_MAX, mappedBytes, blocks, bytes);
  const uint64_t done = *bytes - before;
  if (done < mappedBytes) purgeSpansFreedBefore(UINT64_MAX, UINT64_MAX, mappedBytes - done, blocks, bytes);
}

bool SizeClassPool::purgeGiven(BlockHeader* header) {
  // A span is not: merged with its free neighbours, its memory serves the next request of any size, which
  // would fault it in again (a program reallocating blocks to random sizes took 6x glibc's page faults).
  // What a chain of reallocs leaves behind, decay gives back, or a move into a mapping (purgeSpansFor).
  if (header->span) return false;
  const size_t cls = header->classIndex;
  if (!decays_ || retired_ || heads_[cls] != header || !purgeable(cls)) return false;
  const bool gaveBack = purge(header);
  if (!header->zero) return false;  // the kernel kept its pages: it stays a resident block
  // Off the top of the list, and in again just above the purged blocks.
  DecayState& d = decay_[cls];
  heads_[cls] = header->next;
  const uint64_t others = counters_[cls].freeBlocks - d.purged - 1;  // resident blocks of the class
  BlockHeader** link = &heads_[cls];
  for (uint64_t i = 0; i < others; ++i) link = &(*link)->next;
  header->next = *link;
  *link = header;
  d.purged++;
  d.lowWater = std::min(d.lowWater, others);
  d.due = std::min(d.due, others);
  return gaveBack;
}

bool SizeClassPool::purgeable(size_t cls) const { return capacityOf(cls) >= 4 * os::pageSize(); }

bool SizeClassPool::purge(BlockHeader* header) {
  if (header->zero) return false;  // never written since it was carved or purged: nothing to give back
  if (!zeroRange(header->data(), header->capacity)) {
    header->zero = 0;  // the kernel kept the pages, and what they hold
    return false;
  }
  header->zero = 1;
  return true;
}

bool SizeClassPool::zeroRange(char* data, uint64_t capacity) {
  if (!arena_->discard(data, capacity)) return false;
  // The pages the range covers only in part stay (they hold a neighbour's bytes: a header, the block before or
  // after): the range's own bytes there are zeroed here, so that the whole range reads as zero. The whole pages
  // are [from, to); a range inside one page has none (from == to == its end), and is written whole.
  const uint64_t page = os::pageSize();
  const uintptr_t start = reinterpret_cast<uintptr_t>(data), end = start + capacity;
  const uintptr_t from = std::min<uintptr_t>(roundUp(start, page), end);
  const uintptr_t to = std::max<uintptr_t>(end / page * page, from);
  memset(data, 0, from - start);
  memset(reinterpret_cast<char*>(to), 0, end - to);
  return true;
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

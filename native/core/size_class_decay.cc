// SizeClassPool's side of decay: which free blocks and spans have been idle across the epochs that ended, and
// giving their pages back (the reasons and budgets: core/purge.h).
#include "core/size_class_pool.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "os/os.h"

namespace tp {

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

}  // namespace tp

// SizeClassPool's spans (Growth::Spans): requests served from free spans of the arena, best fit, split and
// coalesced (core/span_heap.h), their headers out of line (core/span_headers.h).
#include "core/size_class_pool.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "os/os.h"

namespace tp {

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
    rewarmedBeside_ += beside;
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

}  // namespace tp

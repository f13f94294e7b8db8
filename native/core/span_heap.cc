#include "core/span_heap.h"

#include <algorithm>
#include <iterator>

namespace tp {

void SpanHeap::insert(uintptr_t start, const Entry& entry, Starts::const_iterator following) {
  // All or nothing: where the second node cannot be allocated (std::bad_alloc) the first is taken out again,
  // so that both indexes always hold the same spans.
  const Starts::iterator at = byStart_.emplace_hint(following, start, entry);
  try {
    bySize_.emplace(SizeKey{entry.bytes, start}, at);
  } catch (...) {
    byStart_.erase(at);
    throw;
  }
  freeBytes_ += entry.bytes;
  if (!entry.zero) residentOf(start) += entry.bytes;
}

SpanHeap::Span SpanHeap::remove(Starts::iterator at, Sizes::iterator bySize) {
  const Span span{reinterpret_cast<char*>(at->first), at->second.bytes, at->second.zero};
  bySize_.erase(bySize == bySize_.end() ? bySize_.find({at->second.bytes, at->first}) : bySize);
  freeBytes_ -= at->second.bytes;
  if (!at->second.zero) residentOf(at->first) -= at->second.bytes;
  byStart_.erase(at);
  return span;
}

SpanHeap::Span SpanHeap::takeRun(Starts::iterator first, Starts::iterator last, uint64_t bytes, uint64_t minRest,
                                 std::vector<char*>* absorbed, Sizes::iterator firstBySize) {
  Span run{reinterpret_cast<char*>(first->first), 0, true};
  Entry tail{};
  const auto following = std::next(last);  // where the rest goes back: the tree need not be searched for it
  for (auto at = first;;) {
    const bool isLast = at == last;
    if (at != first && !at->second.zero) absorbed->push_back(reinterpret_cast<char*>(at->first));
    tail = at->second;
    run.zero = run.zero && at->second.zero;
    run.bytes += at->second.bytes;
    const auto next = std::next(at);
    remove(at, at == first ? firstBySize : bySize_.end());
    if (isLast) break;
    at = next;
  }
  // The rest lies in the last span (a shortest run needs all of the others): it keeps that span's epoch.
  if (bytes != 0 && run.bytes - bytes >= minRest && run.bytes > bytes) {
    insert(reinterpret_cast<uintptr_t>(run.start) + bytes, Entry{run.bytes - bytes, tail.epoch, tail.zero}, following);
    run.bytes = bytes;
  }
  return run;
}

bool SpanHeap::takeBestFit(uint64_t bytes, uint64_t minRest, Span* out, std::vector<char*>* absorbed) {
  const auto fit = bySize_.lower_bound({bytes, 0});
  if (fit != bySize_.end()) {
    *out = takeRun(fit->second, fit->second, bytes, minRest, absorbed, fit);
    return true;
  }
  // The shortest window of spans side by side holding `bytes`: a window over each stretch of neighbours.
  Starts::iterator first = byStart_.end(), bestFirst = byStart_.end(), bestLast = byStart_.end();
  uint64_t total = 0, bestTotal = UINT64_MAX;
  for (auto at = byStart_.begin(); at != byStart_.end(); ++at) {
    const bool joins = first != byStart_.end() && std::prev(at)->first + std::prev(at)->second.bytes == at->first;
    if (!joins) first = at, total = 0;
    total += at->second.bytes;
    while (first != at && total - first->second.bytes >= bytes) total -= (first++)->second.bytes;
    if (total >= bytes && total < bestTotal) bestFirst = first, bestLast = at, bestTotal = total;
  }
  if (bestFirst == byStart_.end()) return false;
  *out = takeRun(bestFirst, bestLast, bytes, minRest, absorbed, bySize_.end());
  return true;
}

bool SpanHeap::takeEndingAt(const char* end, Span* out, std::vector<char*>* absorbed) {
  if (byStart_.empty()) return false;
  const auto last = std::prev(byStart_.end());
  if (last->first + last->second.bytes != reinterpret_cast<uintptr_t>(end)) return false;
  auto first = last;
  while (first != byStart_.begin() && std::prev(first)->first + std::prev(first)->second.bytes == first->first) --first;
  *out = takeRun(first, last, 0, 0, absorbed, bySize_.end());
  return true;
}

uint64_t SpanHeap::bytesAt(const char* start) const {
  uint64_t bytes = 0;
  for (auto at = byStart_.find(reinterpret_cast<uintptr_t>(start)); at != byStart_.end() && at->first == reinterpret_cast<uintptr_t>(start) + bytes; ++at) {
    bytes += at->second.bytes;
  }
  return bytes;
}

bool SpanHeap::takeAt(const char* start, uint64_t bytes, uint64_t minRest, Span* out, std::vector<char*>* absorbed) {
  const auto first = byStart_.find(reinterpret_cast<uintptr_t>(start));
  if (first == byStart_.end()) return false;
  // The shortest run from `start` that holds `bytes`.
  uint64_t total = 0;
  for (auto at = first; at != byStart_.end() && at->first == first->first + total; ++at) {
    total += at->second.bytes;
    if (total >= bytes) {
      *out = takeRun(first, at, bytes, minRest, absorbed, bySize_.end());
      return true;
    }
  }
  return false;
}

int SpanHeap::give(Span span, uint64_t epoch, char* absorbed[2]) {
  const uintptr_t start = reinterpret_cast<uintptr_t>(span.start);
  if (start >= fence_ || start + span.bytes <= fence_) return merge(start, Entry{span.bytes, epoch, span.zero}, absorbed);
  // Reaching across the fence: two spans. The part above merges only with what follows it (its start is no
  // block's), the part below only with what precedes it (its start absorbed then): at most two starts.
  const int above = merge(fence_, Entry{start + span.bytes - fence_, epoch, span.zero}, absorbed);
  return above + merge(start, Entry{fence_ - start, epoch, span.zero}, absorbed + above);
}

int SpanHeap::merge(uintptr_t start, Entry merged, char* absorbed[2]) {
  int count = 0;
  const bool zero = merged.zero;
  // One search of the tree finds both neighbours and where the merged span goes (the span is not in it).
  const auto after = byStart_.lower_bound(start);
  const auto before = after == byStart_.begin() ? byStart_.end() : std::prev(after);
  auto following = after;
  if (after != byStart_.end() && after->first == start + merged.bytes && mergeable(start, merged, after->first, after->second)) {
    if (!after->second.zero) absorbed[count++] = reinterpret_cast<char*>(after->first);
    merged.epoch = std::max(merged.epoch, after->second.epoch);
    merged.zero = merged.zero && after->second.zero;
    following = std::next(after);
    merged.bytes += remove(after).bytes;
  }
  if (before != byStart_.end()) {
    if (before->first + before->second.bytes == start && mergeable(before->first, before->second, start, merged)) {
      if (!zero) absorbed[count++] = reinterpret_cast<char*>(start);
      merged.epoch = std::max(merged.epoch, before->second.epoch);
      merged.zero = merged.zero && before->second.zero;
      merged.bytes += before->second.bytes;
      start = before->first;
      remove(before);
    }
  }
  insert(start, merged, following);
  return count;
}

std::vector<SpanHeap::Span> SpanHeap::idleSince(uint64_t before, uint64_t maxSpans, uint64_t maxBytes) const {
  std::vector<Span> idle;
  uint64_t bytes = 0;
  for (auto at = byStart_.lower_bound(keeping_ ? fence_ : 0); at != byStart_.end(); ++at) {
    const auto& [start, entry] = *at;
    if (idle.size() >= maxSpans || bytes >= maxBytes) break;
    if (entry.epoch >= before || entry.zero) continue;
    idle.push_back({reinterpret_cast<char*>(start), entry.bytes, false});
    bytes += entry.bytes;
  }
  return idle;
}

int SpanHeap::markZero(const char* start, char* absorbed[2]) {
  const auto at = byStart_.find(reinterpret_cast<uintptr_t>(start));
  if (at == byStart_.end()) return 0;
  Entry entry = at->second;
  entry.zero = true;
  remove(at);
  return merge(reinterpret_cast<uintptr_t>(start), entry, absorbed);
}

std::vector<SpanHeap::Span> SpanHeap::spans() const {
  std::vector<Span> all;
  all.reserve(byStart_.size());
  for (const auto& [start, entry] : byStart_) all.push_back({reinterpret_cast<char*>(start), entry.bytes, entry.zero});
  return all;
}

}  // namespace tp

#include "core/span_heap.h"

#include <algorithm>

namespace tp {

void SpanHeap::insert(uintptr_t start, const Entry& entry) {
  byStart_.emplace(start, entry);
  bySize_.emplace(entry.bytes, start);
  freeBytes_ += entry.bytes;
}

SpanHeap::Span SpanHeap::remove(Starts::iterator at) {
  const Span span{reinterpret_cast<char*>(at->first), at->second.bytes, at->second.zero};
  bySize_.erase({at->second.bytes, at->first});
  freeBytes_ -= at->second.bytes;
  byStart_.erase(at);
  return span;
}

bool SpanHeap::takeBestFit(uint64_t bytes, uint64_t minRest, Span* out) {
  const auto fit = bySize_.lower_bound({bytes, 0});
  if (fit == bySize_.end()) return false;
  const auto at = byStart_.find(fit->second);
  const uint64_t epoch = at->second.epoch;
  *out = remove(at);
  if (out->bytes - bytes >= minRest && out->bytes - bytes > 0) {
    insert(reinterpret_cast<uintptr_t>(out->start) + bytes, Entry{out->bytes - bytes, epoch, out->zero});
    out->bytes = bytes;
  }
  return true;
}

bool SpanHeap::takeEndingAt(const char* end, Span* out) {
  if (byStart_.empty()) return false;
  const auto last = std::prev(byStart_.end());
  if (last->first + last->second.bytes != reinterpret_cast<uintptr_t>(end)) return false;
  *out = remove(last);
  return true;
}

bool SpanHeap::takeAt(const char* start, uint64_t bytes, uint64_t minRest, Span* out) {
  const auto at = byStart_.find(reinterpret_cast<uintptr_t>(start));
  if (at == byStart_.end() || at->second.bytes < bytes) return false;
  const uint64_t epoch = at->second.epoch;
  *out = remove(at);
  if (out->bytes - bytes >= minRest && out->bytes > bytes) {
    insert(reinterpret_cast<uintptr_t>(out->start) + bytes, Entry{out->bytes - bytes, epoch, out->zero});
    out->bytes = bytes;
  }
  return true;
}

int SpanHeap::give(Span span, uint64_t epoch, char* absorbed[2]) {
  return merge(reinterpret_cast<uintptr_t>(span.start), Entry{span.bytes, epoch, span.zero}, absorbed);
}

int SpanHeap::merge(uintptr_t start, Entry merged, char* absorbed[2]) {
  int count = 0;
  const bool zero = merged.zero;
  const auto next = byStart_.find(start + merged.bytes);
  if (next != byStart_.end() && mergeable(merged, next->second)) {
    if (!next->second.zero) absorbed[count++] = reinterpret_cast<char*>(next->first);
    merged.epoch = std::max(merged.epoch, next->second.epoch);
    merged.zero = merged.zero && next->second.zero;
    merged.bytes += remove(next).bytes;
  }
  const auto after = byStart_.lower_bound(start);
  if (after != byStart_.begin()) {
    const auto before = std::prev(after);
    if (before->first + before->second.bytes == start && mergeable(merged, before->second)) {
      if (!zero) absorbed[count++] = reinterpret_cast<char*>(start);
      merged.epoch = std::max(merged.epoch, before->second.epoch);
      merged.zero = merged.zero && before->second.zero;
      merged.bytes += before->second.bytes;
      start = before->first;
      remove(before);
    }
  }
  insert(start, merged);
  return count;
}

std::vector<SpanHeap::Span> SpanHeap::idleSince(uint64_t before, uint64_t maxSpans, uint64_t maxBytes) const {
  std::vector<Span> idle;
  uint64_t bytes = 0;
  for (const auto& [start, entry] : byStart_) {
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

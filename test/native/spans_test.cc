// Native tests of the spans the process pool's default classes serve large requests from (Growth::Spans,
// SpanHeap): memory one size freed serves another, neighbours coalesce, idle spans decay, and a header left
// inside a merged span is never taken for a block.
#include <cstring>
#include <ctime>
#include <map>
#include <random>
#include <sys/mman.h>
#include <vector>

#include "check.h"
#include "pool_helpers.h"
#include "core/pool.h"
#include "core/span_heap.h"
#include "os/os.h"

using namespace tp;

namespace {

std::shared_ptr<Pool> spanPool(uint64_t decayMs = PoolOptions::kNoDecay, uint64_t reserve = uint64_t{1} << 30) {
  return tpt::growingPool(Growth::Spans, decayMs, reserve);
}
using tpt::allZero;

// Pages of [data, data + bytes) resident now (the kernel's count: mincore), whole pages only.
uint64_t residentPages(const void* data, uint64_t bytes) {
  const uint64_t page = os::pageSize();
  const uintptr_t first = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) / page * page;
  if (end <= first) return 0;
  std::vector<unsigned char> vec((end - first) / page);
  CHECK(mincore(reinterpret_cast<void*>(first), end - first, vec.data()) == 0);
  uint64_t n = 0;
  for (unsigned char v : vec) n += v & 1;
  return n;
}

// Decay's clock moves on (the pools here run on the synthetic one: pool_helpers.h).
void pause(long ms) { tpt::advanceMs(static_cast<uint64_t>(ms)); }

}  // namespace

TEST(span_heap_takes_the_best_fit_splits_what_is_left_and_merges_neighbours_when_freed) {
  static char memory[1 << 20];
  SpanHeap heap;
  char* absorbed[2];
  CHECK(heap.give({memory, 100000, false}, 0, absorbed) == 0);
  CHECK(heap.give({memory + 200000, 300000, true}, 0, absorbed) == 0);
  CHECK(heap.give({memory + 600000, 90000, false}, 0, absorbed) == 0);
  SpanHeap::Span span;
  std::vector<char*> inside;
  CHECK(heap.takeBestFit(80000, 4096, &span, &inside));  // 90,000 is the smallest that holds it
  CHECK(span.start == memory + 600000 && span.bytes == 80000 && !span.zero);
  CHECK(heap.count() == 3 && heap.freeBytes() == 100000 + 300000 + 10000);  // its rest stays free
  CHECK(heap.takeBestFit(200000, 150000, &span, &inside));  // a rest of 100,000 is below minRest: it goes along
  CHECK(span.start == memory + 200000 && span.bytes == 300000 && span.zero);
  CHECK(!heap.takeBestFit(200000, 0, &span, &inside));
  // Freed in the epoch the span before it was: merged with it, its own start absorbed.
  CHECK(heap.give({memory + 100000, 50000, false}, 0, absorbed) == 1 && absorbed[0] == memory + 100000);
  // Freed in a later epoch: kept apart from the older span before it, which decay must see idle...
  CHECK(heap.give({memory + 150000, 50000, false}, 3, absorbed) == 0);
  CHECK(heap.count() == 3 && heap.idleSince(3, 10, 1 << 30).size() == 2);
  // ...and once that one's pages are given back, apart still: one reads as zero, the other does not.
  CHECK(heap.markZero(memory, absorbed) == 0);
  CHECK(heap.count() == 3);
  CHECK(!heap.takeEndingAt(memory + 200000, &span, &inside));  // not the last span
  // Together they hold a request neither holds alone; what it gets reads as zero only in part.
  CHECK(heap.takeBestFit(200000, 0, &span, &inside) && span.start == memory && span.bytes == 200000 && !span.zero);
  CHECK(!heap.takeAt(memory + 680000, 20000, 0, &span, &inside));
  CHECK(heap.takeAt(memory + 680000, 4000, 8192, &span, &inside) && span.bytes == 10000);  // a rest below 8192 goes along
  CHECK(heap.give(span, 0, absorbed) == 0);
  CHECK(heap.idleSince(5, 10, 1 << 30).size() == 1);  // the rest at 680,000, freed in epoch 0
  CHECK(heap.idleSince(0, 10, 1 << 30).empty());
}

namespace {
// SpanHeap's rules (span_heap.h) done the slow way, on a plain map: what the heap must agree with.
struct ModelSpan {
  uint64_t bytes, epoch;
  bool zero;
};
struct SpanModel {
  std::map<uintptr_t, ModelSpan> spans;
  uint64_t loose;
  bool mergeable(const ModelSpan& a, const ModelSpan& b) const {
    return (a.zero && a.bytes < loose) || (b.zero && b.bytes < loose) || (a.zero == b.zero && (a.zero || a.epoch == b.epoch));
  }
  void give(uintptr_t start, ModelSpan span) {
    auto next = spans.find(start + span.bytes);
    if (next != spans.end() && mergeable(span, next->second)) {
      span = {span.bytes + next->second.bytes, std::max(span.epoch, next->second.epoch), span.zero && next->second.zero};
      spans.erase(next);
    }
    for (auto& [at, before] : spans) {
      if (at + before.bytes == start && mergeable(before, span)) {
        span = {span.bytes + before.bytes, std::max(span.epoch, before.epoch), span.zero && before.zero};
        start = at;
        spans.erase(at);
        break;
      }
    }
    spans[start] = span;
  }
  // The smallest span that holds `bytes` (the lowest on a tie), else the shortest run of neighbours (the
  // lowest on a tie), taken, its rest left in the last span's place.
  bool take(uint64_t bytes, uint64_t minRest, uintptr_t* start, uint64_t* taken, bool* zero) {
    auto best = spans.end();
    for (auto at = spans.begin(); at != spans.end(); ++at) {
      if (at->second.bytes >= bytes && (best == spans.end() || at->second.bytes < best->second.bytes)) best = at;
    }
    auto first = best, last = best;
    if (best == spans.end()) {
      uint64_t bestTotal = UINT64_MAX;
      for (auto from = spans.begin(); from != spans.end(); ++from) {
        uint64_t total = 0;
        for (auto to = from; to != spans.end() && (to == from || std::prev(to)->first + std::prev(to)->second.bytes == to->first); ++to) {
          total += to->second.bytes;
          if (total >= bytes) {
            if (total < bestTotal) bestTotal = total, first = from, last = to;
            break;
          }
        }
      }
      if (first == spans.end()) return false;
    }
    *start = first->first;
    *taken = 0;
    *zero = true;
    const ModelSpan tail = last->second;
    for (auto at = first, end = std::next(last); at != end;) {
      *taken += at->second.bytes;
      *zero = *zero && at->second.zero;
      at = spans.erase(at);
    }
    if (*taken - bytes >= minRest && *taken > bytes) {
      spans[*start + bytes] = {*taken - bytes, tail.epoch, tail.zero};
      *taken = bytes;
    }
    return true;
  }
};
}  // namespace

TEST(span_heap_agrees_with_its_rules_done_the_slow_way_over_random_takes_gives_and_given_back_pages) {
  static char memory[1 << 22];
  const uintptr_t base = reinterpret_cast<uintptr_t>(memory);
  constexpr uint64_t kLoose = 4096;
  SpanHeap heap(kLoose);
  SpanModel model{{}, kLoose};
  std::mt19937_64 random(7);
  std::vector<std::pair<uintptr_t, uint64_t>> live;  // taken spans: (start, bytes)
  // The whole range, given in pieces of random sizes, epochs and kinds.
  for (uintptr_t at = 0; at < sizeof memory;) {
    const uint64_t bytes = std::min<uint64_t>(sizeof memory - at, 1024 + random() % 65536);
    const ModelSpan span{bytes, random() % 3, random() % 4 == 0};
    char* absorbed[2];
    heap.give({memory + at, bytes, span.zero}, span.epoch, absorbed);
    model.give(base + at, span);
    at += bytes;
  }
  uint64_t epoch = 3;
  for (int step = 0; step < 20000; ++step) {
    const unsigned op = random() % 16;
    char* absorbed[2];
    if (op < 7) {
      const uint64_t bytes = 1 + random() % (op == 0 ? 400000 : 40000);
      const uint64_t minRest = random() % 2 ? 0 : 8192;
      SpanHeap::Span got;
      std::vector<char*> inside;
      uintptr_t start = 0;
      uint64_t taken = 0;
      bool zero = false;
      const bool found = model.take(bytes, minRest, &start, &taken, &zero);
      CHECK(heap.takeBestFit(bytes, minRest, &got, &inside) == found);
      if (!found) continue;
      CHECK(reinterpret_cast<uintptr_t>(got.start) == start && got.bytes == taken && got.zero == zero);
      live.emplace_back(start, taken);
    } else if (op < 15 && !live.empty()) {
      const size_t pick = random() % live.size();
      const auto [start, bytes] = live[pick];
      live[pick] = live.back();
      live.pop_back();
      const ModelSpan span{bytes, epoch, random() % 8 == 0};
      heap.give({reinterpret_cast<char*>(start), bytes, span.zero}, span.epoch, absorbed);
      model.give(start, span);
    } else if (op == 15) {
      epoch++;
      const std::vector<SpanHeap::Span> idle = heap.idleSince(epoch - 1, 4, UINT64_MAX);
      for (const SpanHeap::Span& span : idle) {  // decay gives their pages back
        heap.markZero(span.start, absorbed);
        const auto at = model.spans.find(reinterpret_cast<uintptr_t>(span.start));
        if (at == model.spans.end()) continue;  // merged into an idle one before it, given back with it
        ModelSpan entry = at->second;
        model.spans.erase(at);
        entry.zero = true;
        model.give(reinterpret_cast<uintptr_t>(span.start), entry);
      }
    }
    const std::vector<SpanHeap::Span> spans = heap.spans();
    CHECK(spans.size() == model.spans.size());
    uint64_t free = 0, resident = 0;
    auto expected = model.spans.begin();
    for (const SpanHeap::Span& span : spans) {
      CHECK(reinterpret_cast<uintptr_t>(span.start) == expected->first && span.bytes == expected->second.bytes &&
            span.zero == expected->second.zero);
      free += span.bytes;
      if (!span.zero) resident += span.bytes;
      ++expected;
    }
    CHECK(heap.freeBytes() == free && heap.count() == spans.size() && heap.idleResidentBytes() == resident);
  }
}

TEST(span_heap_keeps_a_span_given_back_apart_from_a_resident_neighbour_so_it_is_never_given_back_twice) {
  static char memory[1 << 20];
  SpanHeap heap(8192);
  char* absorbed[2];
  SpanHeap::Span span;
  std::vector<char*> inside;
  CHECK(heap.give({memory, 100000, false}, 0, absorbed) == 0);
  CHECK(heap.give({memory + 100000, 100000, false}, 1, absorbed) == 0);
  // Decay gives the older one back: it reads as zero, and its resident neighbour, freed later, is not merged
  // into it (merged, the whole would read as non-zero: decay would give those pages back and count them
  // again, and calloc would write them).
  CHECK(heap.markZero(memory, absorbed) == 0 && heap.count() == 2);
  const std::vector<SpanHeap::Span> idle = heap.idleSince(2, 10, 1 << 30);
  CHECK(idle.size() == 1 && idle[0].start == memory + 100000 && idle[0].bytes == 100000);
  CHECK(heap.takeBestFit(100000, 4096, &span, &inside) && span.start == memory && span.zero);
  CHECK(heap.give(span, 2, absorbed) == 0);
  // The pages skipped between spans carved apart (zero, below the heap's 8192) merge with either kind.
  CHECK(heap.give({memory + 200000, 4096, true}, 2, absorbed) == 0 && heap.count() == 2);
  CHECK(heap.bytesAt(memory) == 204096);  // the run from `memory`: the zero span, then the other with those pages
  CHECK(heap.give({memory + 204096, 100000, false}, 2, absorbed) == 1 && heap.count() == 2);
  // A block before a run of spans kept apart grows in place through all of them (takeAt).
  CHECK(heap.takeAt(memory, 250000, 4096, &span, &inside) && span.start == memory && span.bytes == 250000 && !span.zero);
  CHECK(heap.count() == 1 && heap.freeBytes() == 304096 - 250000);
}

TEST(memory_decay_gave_back_is_not_merged_into_a_resident_span_and_trim_counts_it_once) {
  constexpr uint64_t kBytes = 1 << 20;
  auto pool = spanPool(50);
  Allocation a = pool->alloc(kBytes), b = pool->alloc(kBytes), wall = pool->alloc(kBytes);
  std::memset(a.data, 1, kBytes);
  std::memset(b.data, 2, kBytes);
  // The small block the calls below reuse, carved before a is free (growth beside a free span gives it back).
  CHECK(pool->release(pool->alloc(1000).data) == ReleaseStatus::Ok);
  CHECK(pool->release(a.data) == ReleaseStatus::Ok);
  // Epochs end (and due spans are given back) on the pool's calls once 50 ms have passed: a's span, idle.
  for (int call = 0; call < 2000 && pool->stats().purgedBlocks == 0; ++call) {
    pause(10);
    CHECK(pool->release(pool->alloc(1000).data) == ReleaseStatus::Ok);
  }
  CHECK(pool->stats().purgedBlocks == 1 && pool->stats().purgedBytes >= kBytes);
  const uint64_t purgedA = pool->stats().purgedBytes;
  CHECK(pool->release(b.data) == ReleaseStatus::Ok);  // b, resident, freed beside what a gave back
  // trim gives back what is resident: b's megabyte and a few skipped pages, not a's memory a second time.
  CHECK(pool->trim() >= kBytes);
  CHECK(pool->stats().purgedBytes - purgedA <= kBytes + 4 * os::pageSize());
  Allocation again = pool->alloc(2 * kBytes);  // given back, all of it reads as zero: calloc need not write it
  CHECK(again.zeroed && allZero(again.data, 2 * kBytes));
  CHECK(pool->release(again.data) == ReleaseStatus::Ok);
  CHECK(pool->release(wall.data) == ReleaseStatus::Ok);
}

TEST(span_heap_takes_a_run_of_neighbours_kept_apart_where_no_single_span_holds_a_request) {
  static char memory[1 << 20];
  SpanHeap heap;
  char* absorbed[2];
  std::vector<char*> inside;
  SpanHeap::Span span;
  CHECK(heap.give({memory, 100000, false}, 0, absorbed) == 0);
  CHECK(heap.give({memory + 100000, 100000, false}, 1, absorbed) == 0);  // apart: freed in another epoch
  CHECK(heap.give({memory + 200000, 100000, false}, 2, absorbed) == 0);
  CHECK(heap.give({memory + 400000, 150000, false}, 2, absorbed) == 0);
  CHECK(heap.count() == 4);
  CHECK(heap.takeBestFit(180000, 4096, &span, &inside));  // no span alone holds it: the first two together
  CHECK(span.start == memory && span.bytes == 180000 && inside.size() == 1 && inside[0] == memory + 100000);
  // The rest (with the second's epoch), apart from the third: 20,000 bytes, then the third's run on.
  CHECK(heap.count() == 3 && heap.bytesAt(memory + 180000) == 120000 && heap.bytesAt(memory + 200000) == 100000);
  CHECK(heap.idleSince(1, 10, 1 << 30).empty() && heap.idleSince(2, 10, 1 << 30).size() == 1);
  inside.clear();
  CHECK(heap.takeEndingAt(memory + 550000, &span, &inside) && span.start == memory + 400000 && inside.empty());
  CHECK(heap.takeEndingAt(memory + 300000, &span, &inside));  // the two side by side at the end, as one
  CHECK(span.start == memory + 180000 && span.bytes == 120000 && inside.size() == 1 && inside[0] == memory + 200000);
  CHECK(heap.count() == 0 && heap.freeBytes() == 0);
}

TEST(spans_serve_a_request_of_one_size_from_memory_another_size_freed) {
  // Six "shapes", each a set of tensors of its own sizes (none shared between shapes), all live together
  // and freed before the next shape: memory freed by one shape serves the next, so the arena holds about
  // the largest shape, where classes of their own held every shape's blocks (here ~4x that).
  auto pool = spanPool();
  uint64_t largestShape = 0;
  for (int round = 0; round < 3; ++round) {
    for (uint64_t shape = 1; shape <= 6; ++shape) {
      std::vector<void*> live;
      uint64_t bytes = 0;
      for (uint64_t t = 1; t <= 8; ++t) {
        const uint64_t size = (shape * 7 + t) * 37 * 1024 + 100 * shape;
        Allocation a = pool->alloc(size);
        CHECK(a.status == AllocStatus::Ok && a.route != Route::OsFallback && a.route != Route::OsOversize);
        CHECK(!a.cacheable);  // a span is not its class's size: no front cache may keep it
        std::memset(a.data, static_cast<int>(shape), size);
        live.push_back(a.data);
        bytes += size;
      }
      largestShape = std::max(largestShape, bytes);
      for (void* p : live) CHECK(pool->release(p) == ReleaseStatus::Ok);
    }
  }
  const PoolStats s = pool->stats();
  CHECK(s.osFallbacks == 0 && s.osOversize == 0);
  // (Each span carved anew may skip up to two pages first, never written: 8 spans of the first shape.)
  CHECK(s.arenaBytes <= largestShape + 8 * 128 + (64 << 10) + 8 * 2 * os::pageSize());
  // The later rounds carved nothing: every request found a free span.
  const uint64_t carved = s.arenaBytes, grown = s.grown;
  for (uint64_t shape = 1; shape <= 6; ++shape) {
    Allocation a = pool->alloc(shape * 300000);
    CHECK(pool->release(a.data) == ReleaseStatus::Ok);
  }
  CHECK(pool->stats().arenaBytes == carved && pool->stats().grown == grown);
}

TEST(freed_neighbours_coalesce_and_a_header_inside_a_merged_span_is_no_block) {
  auto pool = spanPool();
  constexpr uint64_t kBytes = 256 << 10;
  Allocation a = pool->alloc(kBytes), b = pool->alloc(kBytes), c = pool->alloc(kBytes);
  // Carved in turn, each new span on a page of its own after a skipped page (a free span that reads as zero).
  const char* aEnd = static_cast<char*>(a.data) + kBytes;
  // A span's header is out of line: its data starts the span, on a page boundary.
  CHECK(static_cast<char*>(b.data) > aEnd && static_cast<char*>(b.data) <= aEnd + 2 * os::pageSize());
  CHECK(reinterpret_cast<uintptr_t>(b.data) % os::pageSize() == 0);
  CHECK(pool->release(a.data) == ReleaseStatus::Ok);
  CHECK(pool->release(b.data) == ReleaseStatus::Ok);
  // a and b are one span now: b's old start is inside it, and no block.
  CHECK(pool->release(b.data) == ReleaseStatus::NotOwned);
  CHECK(pool->liveSize(b.data) == 0);
  // A request as large as both and the skipped page between them takes that span, where a's and b's sizes
  // alone could not.
  const uint64_t carved = pool->stats().arenaBytes;
  Allocation both = pool->alloc(2 * kBytes + os::pageSize());
  CHECK(both.data == a.data && both.route == Route::Own && pool->stats().arenaBytes == carved);
  std::memset(both.data, 7, 2 * kBytes + os::pageSize());  // over b's old start
  CHECK(pool->release(b.data) == ReleaseStatus::NotOwned);
  CHECK(pool->release(both.data) == ReleaseStatus::Ok);
  CHECK(pool->release(both.data) == ReleaseStatus::NotLive);  // a double free is still told apart
  // c, the last span, is freed: it merges with the free span before it; the next larger request grows the
  // free span at the arena's end rather than carving one beside it.
  CHECK(pool->release(c.data) == ReleaseStatus::Ok);
  Allocation big = pool->alloc(5 * kBytes);
  CHECK(big.data == a.data && big.route == Route::Grown);
  CHECK(pool->stats().arenaBytes == 5 * kBytes);
  CHECK(pool->release(big.data) == ReleaseStatus::Ok);
  // Small requests still come from their classes.
  Allocation small = pool->alloc(1000);
  CHECK(small.status == AllocStatus::Ok && small.cacheable);
  CHECK(pool->release(small.data) == ReleaseStatus::Ok);
}

TEST(a_freed_span_of_a_power_of_two_serves_two_requests_of_half_its_size) {
  // Torch's tensors are powers of two: a span that held 2^k bytes must hold two requests of 2^(k-1) (with
  // each span's header inside it, the second half was 64 bytes short, and every such split left a hole).
  auto pool = spanPool();
  constexpr uint64_t kBytes = 1 << 20;
  Allocation whole = pool->alloc(kBytes), wall = pool->alloc(kBytes);  // wall: whole's span is not the arena's end
  CHECK(pool->release(whole.data) == ReleaseStatus::Ok);
  const uint64_t carved = pool->stats().arenaBytes;
  Allocation low = pool->alloc(kBytes / 2), high = pool->alloc(kBytes / 2);
  CHECK(low.route == Route::Own && high.route == Route::Own && pool->stats().arenaBytes == carved);
  CHECK(static_cast<char*>(high.data) == static_cast<char*>(low.data) + kBytes / 2);
  std::memset(low.data, 1, kBytes / 2);
  std::memset(high.data, 2, kBytes / 2);
  CHECK(static_cast<unsigned char*>(low.data)[kBytes / 2 - 1] == 1 && pool->liveSize(high.data) == kBytes / 2);
  for (void* p : {low.data, high.data, wall.data}) CHECK(pool->release(p) == ReleaseStatus::Ok);
  CHECK(pool->release(high.data) == ReleaseStatus::NotOwned);  // merged into low's span: no block starts there
}

TEST(a_span_pool_falls_back_to_the_os_when_its_reservation_is_spent) {
  auto pool = spanPool(PoolOptions::kNoDecay, uint64_t{4} << 20);
  Allocation a = pool->alloc(3 << 20);
  CHECK(a.route == Route::Grown);
  Allocation b = pool->alloc(2 << 20);  // 1 MiB left: no span, no room
  CHECK(b.status == AllocStatus::Ok && b.route == Route::OsFallback);
  CHECK(pool->release(a.data) == ReleaseStatus::Ok);
  CHECK(pool->release(b.data) == ReleaseStatus::Ok);
  Allocation c = pool->alloc(2 << 20);  // a's span, split
  CHECK(c.route == Route::Own && c.data == a.data);
  CHECK(pool->release(c.data) == ReleaseStatus::Ok);
}

TEST(idle_spans_give_their_pages_back_and_read_as_zero_and_a_span_reused_every_epoch_never_does) {
  auto pool = spanPool(200);
  constexpr uint64_t kBytes = 1 << 20;
  // Two spans apart (a live one between them keeps them from merging): `hot` is handed out every few
  // milliseconds, `idle` never again.
  Allocation idle = pool->alloc(kBytes), wall = pool->alloc(kBytes), hot = pool->alloc(2 * kBytes);
  std::memset(idle.data, 1, kBytes);
  std::memset(hot.data, 2, 2 * kBytes);
  // Freed, hot's span merges with the skipped page before it (see takeSpan): served from there on.
  char* const hotAt = static_cast<char*>(hot.data);
  void* hotData = nullptr;
  CHECK(pool->release(idle.data) == ReleaseStatus::Ok);
  CHECK(pool->release(hot.data) == ReleaseStatus::Ok);
  uint64_t zeroedServed = 0;
  for (int ms = 0; ms < 900; ms += 2) {
    Allocation a = pool->alloc(2 * kBytes);
    if (!hotData) hotData = a.data;
    CHECK(a.data == hotData && static_cast<char*>(a.data) <= hotAt && hotAt - static_cast<char*>(a.data) <= 2 * static_cast<ptrdiff_t>(os::pageSize()));  // the best fit: the idle span is too small
    if (a.zeroed) ++zeroedServed;
    static_cast<char*>(a.data)[2 * kBytes - 1] = 3;
    CHECK(pool->release(a.data) == ReleaseStatus::Ok);
    pause(2);
  }
  const PoolStats s = pool->stats();
  CHECK(s.purgedBlocks == 1 && s.purgedBytes >= kBytes);  // the idle span only
  CHECK(zeroedServed == 0);
  Allocation again = pool->alloc(kBytes);
  CHECK(again.data == idle.data && again.zeroed && allZero(again.data, kBytes));
  CHECK(pool->release(again.data) == ReleaseStatus::Ok);
  CHECK(pool->release(wall.data) == ReleaseStatus::Ok);
}

// Decay's turn without a call (the process pool's thread gives it while the program is quiet) says what is
// left to watch: nothing before anything is carved; live blocks; free memory not yet given back; then, once
// decay has given all of it back with no other call, nothing.
TEST(decay_ticks_alone_give_back_what_was_freed_and_say_what_is_left_to_watch) {
  for (const Growth growth : {Growth::Spans, Growth::BeforeBorrowing}) {
    auto pool = tpt::growingPool(growth, 20);
    CHECK(pool->decayTick() == DecayWatch::Nothing);
    constexpr uint64_t kBytes = 4 << 20;
    Allocation a = pool->alloc(kBytes), b = pool->alloc(kBytes);
    std::memset(a.data, 1, kBytes);
    std::memset(b.data, 2, kBytes);
    CHECK(pool->decayTick() == DecayWatch::Live);
    CHECK(pool->release(a.data) == ReleaseStatus::Ok);
    CHECK(pool->decayTick() == DecayWatch::Idle);  // live b, and a freed less than a period ago
    DecayWatch found = DecayWatch::Idle;
    for (int ms = 0; found != DecayWatch::Live && ms < 10000; ms += 5) {
      pause(5);
      found = pool->decayTick();
    }
    CHECK(found == DecayWatch::Live && residentPages(a.data, kBytes) == 0 && pool->stats().purgedBytes >= kBytes);
    CHECK(pool->release(b.data) == ReleaseStatus::Ok);
    for (int ms = 0; found != DecayWatch::Nothing && ms < 10000; ms += 5) {
      pause(5);
      found = pool->decayTick();
    }
    CHECK(found == DecayWatch::Nothing && residentPages(b.data, kBytes) == 0);
  }
  CHECK(spanPool(PoolOptions::kNoDecay)->decayTick() == DecayWatch::Off);
}

TEST(a_quiet_spell_as_long_as_the_decay_period_gives_every_idle_block_back_first_and_a_shorter_one_nothing_and_the_period_is_told) {
  for (const Growth growth : {Growth::Spans, Growth::BeforeBorrowing}) {
    auto pool = tpt::growingPool(growth, 1000);
    constexpr uint64_t kBytes = 4 << 20;
    Allocation freed = pool->alloc(kBytes), live = pool->alloc(kBytes);
    std::memset(freed.data, 1, kBytes);
    std::memset(live.data, 2, kBytes);
    CHECK(pool->quietPeriodNs(1) == 0);  // nothing free yet: a wait need not stop for decay
    CHECK(pool->release(freed.data) == ReleaseStatus::Ok);
    CHECK(pool->quietPeriodNs(kBytes) == 1000ull * 1000 * 1000);  // the period a wait on descriptors waits first
    CHECK(pool->quietPeriodNs(kBytes * 2) == 0);  // less idle than asked for: not worth splitting a wait
    CHECK(pool->quietFor(999ull * 1000 * 1000) == 0);  // shorter than the period: kept for the next use
    CHECK(residentPages(freed.data, kBytes) > 0 && pool->stats().purgedBytes == 0);
    CHECK(pool->quietFor(1000ull * 1000 * 1000) >= kBytes);
    CHECK(residentPages(freed.data, kBytes) == 0 && pool->stats().purgedBytes >= kBytes);
    CHECK(residentPages(live.data, kBytes) + 1 >= kBytes / os::pageSize());  // a live block is untouched (whole pages)
    for (uint64_t i = 0; i < kBytes; ++i) CHECK(static_cast<const unsigned char*>(live.data)[i] == 2);
    CHECK(pool->quietFor(UINT64_MAX) == 0);  // nothing resident is left free
    CHECK(pool->quietPeriodNs(1) == 0);
  }
  // Decay off, or a plan's classes (pre-faulted by design): nothing, however long.
  auto off = spanPool(PoolOptions::kNoDecay);
  Allocation a = off->alloc(4 << 20);
  std::memset(a.data, 1, 4 << 20);
  CHECK(off->release(a.data) == ReleaseStatus::Ok);
  CHECK(off->quietFor(UINT64_MAX) == 0 && residentPages(a.data, 4 << 20) > 0);
  CHECK(off->quietPeriodNs(1) == 0);
}

TEST(trim_gives_every_free_span_and_block_back_at_once_counted_as_purges_and_keeps_live_ones) {
  // No epoch ends during the test (and with decay off trim works just the same): only trim purges.
  for (const uint64_t decayMs : {uint64_t{60000}, PoolOptions::kNoDecay}) {
    auto pool = spanPool(decayMs);
    constexpr uint64_t kSpan = 4 << 20, kBlock = 32 << 10;  // a span, and a block of a class (below 64 KiB)
    Allocation freed = pool->alloc(kSpan), live = pool->alloc(1 << 20);
    std::vector<void*> blocks;
    for (int i = 0; i < 8; ++i) blocks.push_back(pool->alloc(kBlock).data);
    std::memset(freed.data, 1, kSpan);
    std::memset(live.data, 2, 1 << 20);
    for (void* b : blocks) std::memset(b, 3, kBlock);
    CHECK(pool->release(freed.data) == ReleaseStatus::Ok);
    for (void* b : blocks) CHECK(pool->release(b) == ReleaseStatus::Ok);
    CHECK(residentPages(freed.data, kSpan) > 0);  // freed, not given back: nothing is due
    const PoolStats before = pool->stats();
    CHECK(before.purgedBlocks == 0);
    const uint64_t trimmed = pool->trim();
    const PoolStats after = pool->stats();
    CHECK(trimmed >= kSpan + 8 * kBlock);
    CHECK(after.purgedBytes - before.purgedBytes == trimmed);
    CHECK(after.purgedBlocks - before.purgedBlocks >= 1 + 8);
    CHECK(residentPages(freed.data, kSpan) == 0);
    for (void* b : blocks) CHECK(residentPages(b, kBlock) == 0);
    CHECK(residentPages(live.data, 1 << 20) == (1 << 20) / os::pageSize());  // a live block is untouched
    for (uint64_t i = 0; i < (1 << 20); ++i) CHECK(static_cast<const unsigned char*>(live.data)[i] == 2);
    CHECK(pool->trim() == 0);  // nothing resident is left free
    Allocation again = pool->alloc(kSpan);  // given back memory reads as zero
    CHECK(again.zeroed && allZero(again.data, kSpan));
    CHECK(pool->release(again.data) == ReleaseStatus::Ok);
    CHECK(pool->release(live.data) == ReleaseStatus::Ok);
    pool->close();
    CHECK(pool->trim() == 0);
  }
}

TEST(trim_leaves_what_a_plan_names_resident) {
  PlanSpec plan;
  plan.interval = 4096;
  plan.classes.push_back({1 << 20, 4});
  PoolOptions options;
  options.growth = Growth::AfterBorrowing;
  options.clock = tpt::syntheticClock;
  options.decayMs = 0;
  std::string error;
  auto pool = Pool::create(plan, options, &error);
  CHECK(pool != nullptr);
  Allocation a = pool->alloc(1 << 20);
  std::memset(a.data, 1, 1 << 20);
  CHECK(pool->release(a.data) == ReleaseStatus::Ok);
  CHECK(pool->trim() == 0 && pool->stats().purgedBlocks == 0);
  CHECK(residentPages(a.data, 1 << 20) + 1 >= (1 << 20) / os::pageSize());  // pre-faulted, and kept
}

TEST(a_span_reserve_written_after_start_up_stays_resident_through_decay_and_trim_and_what_is_beyond_is_given_back) {
  constexpr uint64_t kReserve = 8 << 20, kThird = 3 << 20, kBeyond = 4 << 20;
  PlanSpec plan = defaultPlan();
  plan.spanReserve = kReserve;
  PoolOptions options;
  options.growth = Growth::Spans;
  options.growReserve = uint64_t{1} << 30;
  options.clock = tpt::syntheticClock;
  options.decayMs = 20;
  std::string error;
  auto pool = Pool::create(plan, options, &error);
  CHECK(pool != nullptr);
  CHECK(pool->stats().arenaBytes >= kReserve);
  // Start-up (before the first mark): what it wrote in the reserve and freed goes back at a trim.
  Allocation startUp = pool->alloc(kBeyond);
  std::memset(startUp.data, 7, kBeyond);
  CHECK(pool->release(startUp.data) == ReleaseStatus::Ok);
  CHECK(pool->trim() >= kBeyond && residentPages(startUp.data, kBeyond) == 0);
  pool->markIteration();
  // Requests within the reserve: fresh (or given back) memory, resident only once written.
  Allocation a = pool->alloc(kThird), b = pool->alloc(kThird);
  CHECK(a.status == AllocStatus::Ok && b.status == AllocStatus::Ok && a.zeroed && b.zeroed);
  char* const reserve = static_cast<char*>(a.data);  // the first span: the reserve's start
  CHECK(residentPages(reserve, kReserve) == 0);
  // One larger than what is left of it reaches beyond (faults in where written): what decay and trim give back.
  Allocation c = pool->alloc(kBeyond);
  CHECK(c.status == AllocStatus::Ok && c.route == Route::Grown);
  char* const cEnd = static_cast<char*>(c.data) + kBeyond;
  CHECK(cEnd > reserve + kReserve);
  std::memset(a.data, 1, kThird);
  std::memset(b.data, 2, kThird);
  std::memset(c.data, 3, kBeyond);
  for (void* p : {a.data, b.data, c.data}) CHECK(pool->release(p) == ReleaseStatus::Ok);
  for (int ms = 0; ms < 300; ms += 2) {  // epochs end, idle spans come due
    Allocation small = pool->alloc(64 << 10);
    CHECK(pool->release(small.data) == ReleaseStatus::Ok);
    pause(2);
  }
  pool->trim();
  const uint64_t beyond = static_cast<uint64_t>(cEnd - (reserve + kReserve));
  CHECK(pool->stats().purgedBytes >= kBeyond + beyond);
  CHECK(residentPages(reserve, 2 * kThird) == 2 * kThird / os::pageSize());  // written: kept
  CHECK(residentPages(reserve + kReserve, beyond) == 0);
  CHECK(pool->decayTick() == DecayWatch::Nothing);  // the kept reserve is not memory decay would give back
  // A reserve the pool has no room for is refused, with the reason.
  options.growReserve = kReserve / 2;
  CHECK(Pool::create(plan, options, &error) == nullptr && error.find("span reserve") != std::string::npos);
}

TEST(realloc_in_place_grows_a_span_into_the_free_span_after_it_or_the_arenas_end) {
  auto pool = spanPool();
  constexpr uint64_t kBytes = 256 << 10;
  Allocation a = pool->alloc(kBytes), b = pool->alloc(kBytes);
  std::memset(a.data, 5, kBytes);
  CHECK(pool->release(b.data) == ReleaseStatus::Ok);
  const uint64_t carved = pool->stats().arenaBytes;
  CHECK(pool->resizeInPlace(a.data, kBytes + 1000));  // into b's span: b's header is no block from now on
  CHECK(pool->liveSize(a.data) == kBytes + 1000 && pool->stats().arenaBytes == carved);
  CHECK(pool->liveSize(b.data) == 0 && pool->release(b.data) == ReleaseStatus::NotOwned);
  CHECK(pool->resizeInPlace(a.data, 3 * kBytes));  // past b's span: the arena's end grows
  CHECK(pool->stats().arenaBytes == 3 * kBytes);
  CHECK(static_cast<unsigned char*>(a.data)[kBytes - 1] == 5);
  Allocation c = pool->alloc(kBytes);  // now after a (past a skipped page): a cannot grow into c
  CHECK(!pool->resizeInPlace(a.data, 3 * kBytes + 2 * os::pageSize() + 4096));
  CHECK(pool->liveSize(a.data) == 3 * kBytes);
  CHECK(pool->release(c.data) == ReleaseStatus::Ok);
  CHECK(pool->release(a.data) == ReleaseStatus::Ok);
}

TEST(a_span_growing_past_the_realloc_mapping_bound_moves_to_a_mapping_of_its_own_which_the_os_resizes) {
  constexpr uint64_t kMiB = 1 << 20;
  PoolOptions options;
  options.growth = Growth::Spans;
  options.clock = tpt::syntheticClock;
  options.decayMs = PoolOptions::kNoDecay;
  options.reallocMappedFrom = 4 * kMiB;
  std::string error;
  auto pool = Pool::create(defaultPlan(), options, &error);
  CHECK(pool != nullptr);
  Allocation a = pool->alloc(kMiB);
  CHECK(a.status == AllocStatus::Ok && a.route == Route::Grown);
  CHECK(pool->resizeInPlace(a.data, 3 * kMiB));    // below the bound: the span grows at the arena's end
  CHECK(!pool->resizeInPlace(a.data, 5 * kMiB));   // past it: refused, nothing changed
  CHECK(pool->liveSize(a.data) == 3 * kMiB);
  CHECK(pool->allocMoved(3 * kMiB) == nullptr);    // a mapping only for a block that large
  std::memset(a.data, 4, 3 * kMiB);
  const auto holds4 = [](const void* p, uint64_t bytes) {
    for (uint64_t i = 0; i < bytes; ++i) {
      if (static_cast<const unsigned char*>(p)[i] != 4) return false;
    }
    return true;
  };
  void* moved = pool->allocMoved(5 * kMiB);
  CHECK(moved != nullptr && pool->liveSize(moved) == 5 * kMiB);
  std::memcpy(moved, a.data, 3 * kMiB);
  CHECK(pool->releaseMoved(a.data) == ReleaseStatus::Ok);
  PoolStats s = pool->stats();
  CHECK(s.movedToMappings == 1 && s.osFallbacks == 0 && s.osOversize == 0 && s.osLiveBlocks == 1 && s.liveBlocks == 1);
  // From now on the OS resizes it: its pages move, its bytes stay.
  void* grown = pool->resizeMapped(moved, 40 * kMiB);
  CHECK(grown != nullptr && pool->liveSize(grown) == 40 * kMiB && holds4(grown, 3 * kMiB));
  // A span allocated past the bound grows in place as before: only growth across it moves a block.
  Allocation big = pool->alloc(8 * kMiB);
  CHECK(big.route == Route::Grown && pool->resizeInPlace(big.data, 9 * kMiB));
  CHECK(pool->release(big.data) == ReleaseStatus::Ok);
  const uint64_t mappedBefore = os::mappedBytes();
  CHECK(pool->release(grown) == ReleaseStatus::Ok);  // unmapped at once: no free span waits for decay
  CHECK(os::mappedBytes() < mappedBefore && pool->stats().osLiveBlocks == 0);
  // A pool without the bound (the napi pool's default) never moves a block.
  auto plain = spanPool();
  CHECK(plain->allocMoved(64 * kMiB) == nullptr && plain->stats().allocs == 0);
}

TEST(a_moved_block_freed_raises_the_realloc_mapping_bound_to_its_length_up_to_32_MiB) {
  // As glibc's mmap threshold: blocks a program reallocs to that size again and again stay in the arena,
  // where each would otherwise map fresh pages, fault them in and unmap them once freed.
  constexpr uint64_t kMiB = 1 << 20;
  PoolOptions options;
  options.growth = Growth::Spans;
  options.clock = tpt::syntheticClock;
  options.decayMs = 60000;
  options.reallocMappedFrom = 4 * kMiB;
  std::string error;
  auto pool = Pool::create(defaultPlan(), options, &error);
  CHECK(pool != nullptr);
  void* moved = pool->allocMoved(6 * kMiB);
  CHECK(moved != nullptr && pool->stats().movedToMappings == 1);
  CHECK(pool->allocMoved(5 * kMiB) != nullptr);  // the bound is where it was while the first is live
  CHECK(pool->stats().movedToMappings == 2);
  CHECK(pool->release(moved) == ReleaseStatus::Ok);
  // Now a block of the freed one's size, or smaller, stays in the arena: its span grows in place past 4 MiB.
  CHECK(pool->allocMoved(6 * kMiB) == nullptr && pool->allocMoved(5 * kMiB) == nullptr);
  Allocation a = pool->alloc(3 * kMiB);
  CHECK(a.status == AllocStatus::Ok && pool->resizeInPlace(a.data, 6 * kMiB));
  CHECK(pool->release(a.data) == ReleaseStatus::Ok);
  // A larger one still moves; one freed larger than 32 MiB (glibc's most) raises the bound no further.
  void* large = pool->allocMoved(40 * kMiB);
  CHECK(large != nullptr && pool->release(large) == ReleaseStatus::Ok);
  void* after = pool->allocMoved(7 * kMiB);
  CHECK(after != nullptr && pool->stats().movedToMappings == 4);
  CHECK(pool->release(after) == ReleaseStatus::Ok);
  CHECK(pool->allocMoved(7 * kMiB) == nullptr);
  // A block the OS mapped for any other reason (an OS fallback) moves nothing.
  auto plain = Pool::create(defaultPlan(), options, &error);
  Allocation oversize = plain->alloc(plain->classStats().back().size + kMiB);  // larger than every class (never written)
  CHECK(oversize.route == Route::OsOversize && plain->release(oversize.data) == ReleaseStatus::Ok);
  void* first = plain->allocMoved(5 * kMiB);
  CHECK(first != nullptr && plain->release(first) == ReleaseStatus::Ok);
}

TEST(a_span_realloc_moved_elsewhere_stays_resident_for_the_next_request) {
  // Its memory serves the next request of any size: given back at once, that request faulted it in again.
  constexpr uint64_t kBytes = 1 << 20;
  auto pool = spanPool(60000);
  Allocation a = pool->alloc(kBytes), wall = pool->alloc(kBytes);
  std::memset(a.data, 5, kBytes);
  CHECK(pool->releaseMoved(a.data) == ReleaseStatus::Ok);
  CHECK(pool->stats().purgedBytes == 0);
  Allocation b = pool->alloc(kBytes / 2);
  CHECK(b.data == a.data && !b.zeroed && residentPages(b.data, kBytes / 2) == kBytes / 2 / os::pageSize());
  CHECK(pool->release(b.data) == ReleaseStatus::Ok && pool->release(wall.data) == ReleaseStatus::Ok);
}

TEST(memory_given_back_and_soon_handed_out_again_lengthens_the_decay_period) {
  // A 4 MiB span used every 300 ms, a decay period of 100 ms: idle for longer than an epoch between uses, it
  // is given back, and the next use faults it in again. Each such return doubles the period, so after a few
  // the span stays resident (with a fixed period, nearly every use found it given back).
  auto pool = spanPool(100);
  constexpr uint64_t kBytes = 4 << 20;
  int rewarmed = 0;
  for (int use = 0; use < 14; ++use) {
    Allocation a = pool->alloc(kBytes);
    CHECK(a.status == AllocStatus::Ok);
    if (use > 0 && a.zeroed) ++rewarmed;
    std::memset(a.data, 1, kBytes);
    CHECK(pool->release(a.data) == ReleaseStatus::Ok);
    for (int k = 0; k < 6; ++k) {  // calls of the pool while it waits: decay runs on them
      pause(50);
      Allocation small = pool->alloc(1000);
      CHECK(pool->release(small.data) == ReleaseStatus::Ok);
    }
  }
  CHECK(rewarmed >= 1);  // it was given back at first
  CHECK(rewarmed <= 5);
}

TEST(memory_given_back_for_memory_beside_the_pool_and_handed_out_again_leaves_the_decay_period_as_it_was) {
  // A program whose C heap grows while it reuses a span: the pool gives the span back for the heap's growth
  // (tryPurgeSpansFor), the program takes it again. Decay gave nothing back, so its period stays 100 ms and an
  // idle span still goes back within a few periods (counted as decay's, the period doubled at each epoch: 1.6 s
  // after four).
  auto pool = spanPool(100);
  constexpr uint64_t kBytes = 4 << 20;
  const auto callsFor = [&](int ms) {  // decay runs on the pool's calls
    for (int t = 0; t < ms; t += 50) {
      pause(50);
      Allocation small = pool->alloc(1000);
      CHECK(pool->release(small.data) == ReleaseStatus::Ok);
    }
  };
  for (int use = 0; use < 4; ++use) {
    Allocation a = pool->alloc(kBytes);
    CHECK(a.status == AllocStatus::Ok);
    std::memset(a.data, 1, kBytes);
    CHECK(pool->release(a.data) == ReleaseStatus::Ok);
    CHECK(pool->tryPurgeSpansFor(kBytes));
    Allocation again = pool->alloc(kBytes);
    CHECK(again.status == AllocStatus::Ok && again.zeroed);  // what went back, handed out again
    std::memset(again.data, 2, kBytes);
    CHECK(pool->release(again.data) == ReleaseStatus::Ok);
    callsFor(150);  // an epoch ends
  }
  Allocation idle = pool->alloc(kBytes);
  CHECK(idle.status == AllocStatus::Ok);
  std::memset(idle.data, 3, kBytes);
  const uint64_t purged = pool->stats().purgedBytes;
  CHECK(pool->release(idle.data) == ReleaseStatus::Ok);
  callsFor(600);
  CHECK(pool->stats().purgedBytes - purged >= kBytes);
}

TEST(fit_address_space_gives_back_the_unused_reservation_and_the_pool_still_serves) {
  // A program that lowered its RLIMIT_AS (native/preload/address_limit.cc): the arena keeps what it carved,
  // its blocks intact, and gives back the rest of its reservation; later requests are still served.
  auto pool = spanPool(PoolOptions::kNoDecay, uint64_t{1} << 30);
  std::vector<void*> live;
  for (int i = 0; i < 4; ++i) {
    Allocation a = pool->alloc(3 << 20);
    CHECK(a.status == AllocStatus::Ok);
    std::memset(a.data, i + 1, 3 << 20);
    live.push_back(a.data);
  }
  const PoolStats before = pool->stats();
  const uint64_t mapped = os::mappedBytes();
  // Room for 128 MiB more than the arena carved: it keeps a share of it spare (16 MiB), in whole granules.
  const uint64_t spare = (uint64_t{128} << 20) / Pool::kLimitedSpareShare;
  const uint64_t released = pool->fitAddressSpace(before.arenaBytes + (128 << 20), before.reservedBytes);
  const PoolStats fitted = pool->stats();
  CHECK(released > 0 && fitted.reservedBytes == before.reservedBytes - released);
  CHECK(fitted.reservedBytes >= before.arenaBytes + spare && fitted.reservedBytes <= before.arenaBytes + spare + 2 * os::kTrackGranule);
  CHECK(os::mappedBytes() == mapped - released);
  // No room at all: down to what was carved, rounded up to a granule.
  pool->fitAddressSpace(0, 0);
  CHECK(pool->stats().reservedBytes <= before.arenaBytes + os::kTrackGranule);
  CHECK(pool->fitAddressSpace(0, 0) == 0);  // nothing left to give
  for (size_t i = 0; i < live.size(); ++i) {
    const unsigned char* bytes = static_cast<const unsigned char*>(live[i]);
    CHECK(bytes[0] == i + 1 && bytes[(3 << 20) - 1] == i + 1);
  }
  Allocation more = pool->alloc(40 << 20);  // no spare reservation to carve from: the OS serves it
  CHECK(more.status == AllocStatus::Ok);
  std::memset(more.data, 9, 40 << 20);
  CHECK(pool->release(more.data) == ReleaseStatus::Ok);
  for (void* p : live) CHECK(pool->release(p) == ReleaseStatus::Ok);
}

TEST(a_refused_request_gets_back_the_address_space_of_the_free_spans_at_the_arenas_end) {
  // Under an RLIMIT_AS a request the OS refused is made again once the pool gave back what it holds unused
  // (native/preload/interpose.cc, orAgain): its spare reservation and the free spans at its arena's end.
  auto pool = spanPool(PoolOptions::kNoDecay, uint64_t{1} << 30);
  std::vector<void*> blocks;
  for (int i = 0; i < 8; ++i) {
    Allocation a = pool->alloc(3 << 20);
    CHECK(a.status == AllocStatus::Ok);
    std::memset(a.data, i + 1, 3 << 20);
    blocks.push_back(a.data);
  }
  // The last four freed: the arena's end is free; the first four stay, their bytes intact.
  for (int i = 4; i < 8; ++i) CHECK(pool->release(blocks[i]) == ReleaseStatus::Ok);
  const PoolStats before = pool->stats();
  const uint64_t mapped = os::mappedBytes();
  const uint64_t released = pool->giveBackAddressSpace();
  const PoolStats after = pool->stats();
  CHECK(released > 0 && after.reservedBytes == before.reservedBytes - released && os::mappedBytes() == mapped - released);
  CHECK(after.arenaBytes <= before.arenaBytes - (12 << 20));  // the four free spans are no longer carved
  CHECK(after.reservedBytes <= after.arenaBytes + os::kTrackGranule);
  for (int i = 0; i < 4; ++i) {
    const unsigned char* bytes = static_cast<const unsigned char*>(blocks[i]);
    CHECK(bytes[0] == i + 1 && bytes[(3 << 20) - 1] == i + 1);
  }
  CHECK(pool->giveBackAddressSpace() == 0);  // nothing left to give
  // The freed blocks are no longer the pool's; new requests are served (from what is left, or the OS).
  CHECK(pool->release(blocks[5]) == ReleaseStatus::NotOwned);
  Allocation more = pool->alloc(3 << 20);
  CHECK(more.status == AllocStatus::Ok);
  std::memset(more.data, 9, 3 << 20);
  CHECK(pool->release(more.data) == ReleaseStatus::Ok);
  for (int i = 0; i < 4; ++i) CHECK(pool->release(blocks[i]) == ReleaseStatus::Ok);
}

TEST(a_block_realloc_moves_to_a_mapping_gives_back_as_much_free_span_memory_and_no_live_block) {
  constexpr uint64_t kMiB = 1 << 20;
  PoolOptions options;
  options.growth = Growth::Spans;
  options.clock = tpt::syntheticClock;
  options.decayMs = 60000;  // no epoch ends during the test: only the move gives anything back
  options.reallocMappedFrom = 4 * kMiB;
  std::string error;
  auto pool = Pool::create(defaultPlan(), options, &error);
  CHECK(pool != nullptr);
  // 8 MiB of free spans that were written (resident), before a live block that must keep its bytes.
  std::vector<void*> freed;
  for (int i = 0; i < 4; ++i) {
    Allocation b = pool->alloc(2 * kMiB);
    CHECK(b.status == AllocStatus::Ok);
    std::memset(b.data, 1, 2 * kMiB);
    freed.push_back(b.data);
  }
  Allocation live = pool->alloc(2 * kMiB);
  CHECK(live.status == AllocStatus::Ok);
  std::memset(live.data, 7, 2 * kMiB);
  Allocation old = pool->alloc(kMiB);
  CHECK(old.status == AllocStatus::Ok);
  std::memset(old.data, 9, kMiB);
  for (void* p : freed) CHECK(pool->release(p) == ReleaseStatus::Ok);
  const auto holds = [](const void* p, uint64_t bytes, unsigned char value) {
    for (uint64_t i = 0; i < bytes; ++i) {
      if (static_cast<const unsigned char*>(p)[i] != value) return false;
    }
    return true;
  };
  const uint64_t purged0 = pool->stats().purgedBytes;
  // The move maps 6 MiB: free spans give back at least that much of their 8.
  void* moved = pool->allocMoved(6 * kMiB);
  CHECK(moved != nullptr);
  std::memcpy(moved, old.data, kMiB);
  CHECK(pool->releaseMoved(old.data) == ReleaseStatus::Ok);
  CHECK(pool->stats().purgedBytes - purged0 >= 6 * kMiB);
  // The mapping grows by 6 MiB more: the rest of the 8 goes back.
  void* grown = pool->resizeMapped(moved, 12 * kMiB);
  CHECK(grown != nullptr && holds(grown, kMiB, 9));
  CHECK(pool->stats().purgedBytes - purged0 >= 8 * kMiB);
  // Live blocks keep their bytes, and the pool serves from the given-back spans again.
  CHECK(holds(live.data, 2 * kMiB, 7));
  Allocation again = pool->alloc(2 * kMiB);
  CHECK(again.status == AllocStatus::Ok && holds(again.data, 2 * kMiB, 0) && holds(live.data, 2 * kMiB, 7));
  CHECK(pool->release(again.data) == ReleaseStatus::Ok && pool->release(grown) == ReleaseStatus::Ok);
  CHECK(pool->release(live.data) == ReleaseStatus::Ok);
  // A pool that never decays keeps its free spans resident, as it was told.
  options.clock = tpt::syntheticClock;
  options.decayMs = PoolOptions::kNoDecay;
  auto keeping = Pool::create(defaultPlan(), options, &error);
  CHECK(keeping != nullptr);
  Allocation kept = keeping->alloc(8 * kMiB);
  CHECK(kept.status == AllocStatus::Ok);
  std::memset(kept.data, 1, 8 * kMiB);
  CHECK(keeping->release(kept.data) == ReleaseStatus::Ok);
  void* keptMoved = keeping->allocMoved(6 * kMiB);
  CHECK(keptMoved != nullptr && keeping->stats().purgedBytes == 0);
  CHECK(keeping->release(keptMoved) == ReleaseStatus::Ok);
}

// A request to give back a little more than a free span holds: that span goes whole, and the rest of the
// request is split off the front of the next one, which starts where a live block ends, inside a page. The
// bytes given back may lie within that page: the page's first bytes are the live block's own and stay as they
// were (an inference service's weights lost their last 512 bytes to a memset that started at the page).
TEST(giving_back_part_of_a_free_span_that_starts_inside_a_page_leaves_the_live_block_before_it_whole) {
  constexpr uint64_t kMiB = 1 << 20;
  const uint64_t page = os::pageSize();
  for (uint64_t shortBy = 64; shortBy < page; shortBy += 64) {
    auto pool = spanPool(60000);  // no epoch ends: only tryPurgeSpansFor gives anything back
    // In address order: [front | the rest of its span] [apart] [live | a free span starting inside a page].
    Allocation first = pool->alloc(256 << 10), apart = pool->alloc(64 << 10), second = pool->alloc(4 * kMiB);
    CHECK(first.status == AllocStatus::Ok && apart.status == AllocStatus::Ok && second.status == AllocStatus::Ok);
    std::memset(first.data, 1, 256 << 10);
    std::memset(second.data, 2, 4 * kMiB);
    CHECK(pool->release(first.data) == ReleaseStatus::Ok);
    const uint64_t wanted = 128 << 10;
    const uint64_t kept = (256 << 10) + page - (wanted - shortBy);  // its span also holds the page carved after it
    Allocation front = pool->alloc(kept);
    CHECK(front.status == AllocStatus::Ok && front.data == first.data);
    std::memset(front.data, 3, kept);
    CHECK(pool->release(second.data) == ReleaseStatus::Ok);
    const uint64_t liveBytes = 2 * kMiB + 512;
    Allocation live = pool->alloc(liveBytes);
    CHECK(live.status == AllocStatus::Ok && live.data > apart.data);  // second's span (with the page before it)
    std::memset(live.data, 4, liveBytes);
    CHECK(pool->tryPurgeSpansFor(wanted));
    for (uint64_t i = 0; i < kept; ++i) CHECK(static_cast<const unsigned char*>(front.data)[i] == 3);
    for (uint64_t i = 0; i < liveBytes; ++i) CHECK(static_cast<const unsigned char*>(live.data)[i] == 4);
    // What went back reads as zero when handed out again.
    Allocation again = pool->alloc(wanted);
    CHECK(again.status == AllocStatus::Ok && (!again.zeroed || allZero(again.data, wanted)));
    CHECK(pool->release(again.data) == ReleaseStatus::Ok);
    CHECK(pool->release(front.data) == ReleaseStatus::Ok && pool->release(live.data) == ReleaseStatus::Ok);
    CHECK(pool->release(apart.data) == ReleaseStatus::Ok);
  }
}

TEST(memory_beside_the_pool_growing_gives_back_as_much_of_a_free_span_and_no_more) {
  constexpr uint64_t kMiB = 1 << 20;
  const uint64_t page = os::pageSize();
  auto pool = spanPool(60000);  // no epoch ends during the test: only tryPurgeSpansFor gives anything back
  // `expected` bytes of [data, data + bytes) resident, to a page either side (a span need not start on one).
  const auto residentAbout = [page](const void* data, uint64_t bytes, uint64_t expected) {
    const uint64_t pages = residentPages(data, bytes);
    return pages + 1 >= expected / page && pages <= expected / page + 1;
  };
  Allocation before = pool->alloc(2 * kMiB), freed = pool->alloc(16 * kMiB), after = pool->alloc(kMiB);
  CHECK(before.status == AllocStatus::Ok && freed.status == AllocStatus::Ok && after.status == AllocStatus::Ok);
  std::memset(before.data, 7, 2 * kMiB);
  std::memset(freed.data, 1, 16 * kMiB);
  std::memset(after.data, 9, kMiB);
  CHECK(pool->release(freed.data) == ReleaseStatus::Ok);
  const uint64_t purged0 = pool->stats().purgedBytes, carved = pool->stats().arenaBytes;
  // 3 MiB of growth: 3 MiB of the 16 go back, not the whole span; then 3 more, not the same 3.
  CHECK(pool->tryPurgeSpansFor(3 * kMiB));
  CHECK(pool->stats().purgedBytes - purged0 == 3 * kMiB);
  CHECK(residentAbout(freed.data, 16 * kMiB, 13 * kMiB));
  CHECK(pool->tryPurgeSpansFor(3 * kMiB));
  CHECK(pool->stats().purgedBytes - purged0 == 6 * kMiB);
  CHECK(residentAbout(freed.data, 16 * kMiB, 10 * kMiB));
  // A little growth gives back at least kSpanFrom (a smaller span that reads as zero merges with any neighbour).
  CHECK(pool->tryPurgeSpansFor(1));
  CHECK(pool->stats().purgedBytes - purged0 == 6 * kMiB + (64 << 10));  // SizeClassPool::kSpanFrom
  // Live blocks keep their bytes, and the freed memory serves a request of its whole size again, carving nothing.
  for (uint64_t i = 0; i < 2 * kMiB; ++i) CHECK(static_cast<const unsigned char*>(before.data)[i] == 7);
  for (uint64_t i = 0; i < kMiB; ++i) CHECK(static_cast<const unsigned char*>(after.data)[i] == 9);
  Allocation again = pool->alloc(16 * kMiB);
  CHECK(again.status == AllocStatus::Ok && pool->stats().arenaBytes == carved);
  CHECK(pool->release(again.data) == ReleaseStatus::Ok);
  // Where another thread holds the lock: nothing done, and it says so.
  const uint64_t purged1 = pool->stats().purgedBytes;
  pool->lockForFork();
  CHECK(!pool->tryPurgeSpansFor(3 * kMiB));
  pool->unlockAfterFork(false);
  CHECK(pool->stats().purgedBytes == purged1);
  CHECK(pool->release(before.data) == ReleaseStatus::Ok && pool->release(after.data) == ReleaseStatus::Ok);
  // A pool that never decays keeps its free spans resident, as it was told.
  auto keeping = spanPool(PoolOptions::kNoDecay);
  Allocation kept = keeping->alloc(8 * kMiB);
  CHECK(kept.status == AllocStatus::Ok);
  std::memset(kept.data, 1, 8 * kMiB);
  CHECK(keeping->release(kept.data) == ReleaseStatus::Ok);
  CHECK(keeping->tryPurgeSpansFor(4 * kMiB) && keeping->stats().purgedBytes == 0);
}

TEST(a_buffer_growing_by_doubling_leaves_little_of_what_it_freed_resident_and_a_steady_loop_gives_back_nothing) {
  // A program whose buffer grows by doubling (a dict's table, a vector): each new one is larger than all it freed
  // before, which glibc would have mapped and unmapped. The arena grows for each; past an eighth over the most
  // ever live, its free spans give back as much as it grew, so that it does not hold both.
  constexpr uint64_t kMiB = 1 << 20;
  const uint64_t page = os::pageSize();
  auto pool = spanPool(60000);  // no epoch ends during the test: only growth gives anything back
  std::vector<std::pair<void*, uint64_t>> freed;
  Allocation buffer = pool->alloc(64 << 10);
  CHECK(buffer.status == AllocStatus::Ok);
  std::memset(buffer.data, 1, 64 << 10);
  for (uint64_t bytes = 128 << 10; bytes <= 16 * kMiB; bytes *= 2) {
    Allocation next = pool->alloc(bytes);
    CHECK(next.status == AllocStatus::Ok);
    std::memcpy(next.data, buffer.data, bytes / 2);
    std::memset(static_cast<char*>(next.data) + bytes / 2, 1, bytes / 2);
    CHECK(pool->release(buffer.data) == ReleaseStatus::Ok);
    freed.emplace_back(buffer.data, bytes / 2);
    buffer = next;
  }
  for (uint64_t i = 0; i < 16 * kMiB; ++i) CHECK(static_cast<const unsigned char*>(buffer.data)[i] == 1);
  // What the older buffers still hold (the kernel's count; nearly 16 MiB without this) beside the live one: no more
  // than an eighth over the most ever live (the last copy's two buffers, 24 MiB), to a span's rounding.
  uint64_t residentFreed = 0;
  for (const auto& [data, bytes] : freed) residentFreed += residentPages(data, bytes) * page;
  const uint64_t peak = pool->stats().peakBytesLive;
  CHECK(pool->stats().purgedBytes > 0 && residentFreed + 16 * kMiB <= peak + peak / 8 + (64 << 10));
  CHECK(pool->release(buffer.data) == ReleaseStatus::Ok);
  // A loop whose arena has stopped growing gives back nothing, however much is free between its iterations.
  for (int step = 0; step < 3; ++step) {  // warm-up: the loop's own layout
    Allocation a = pool->alloc(12 * kMiB), b = pool->alloc(12 * kMiB);
    CHECK(a.status == AllocStatus::Ok && b.status == AllocStatus::Ok);
    CHECK(pool->release(b.data) == ReleaseStatus::Ok && pool->release(a.data) == ReleaseStatus::Ok);
  }
  const uint64_t carved = pool->stats().arenaBytes, purged = pool->stats().purgedBytes;
  for (int step = 0; step < 20; ++step) {
    Allocation a = pool->alloc(12 * kMiB), b = pool->alloc(12 * kMiB), c = pool->alloc(3 * kMiB);
    CHECK(a.status == AllocStatus::Ok && b.status == AllocStatus::Ok && c.status == AllocStatus::Ok);
    std::memset(a.data, step, 12 * kMiB);
    std::memset(b.data, step, 12 * kMiB);
    std::memset(c.data, step, 3 * kMiB);
    CHECK(pool->release(b.data) == ReleaseStatus::Ok && pool->release(c.data) == ReleaseStatus::Ok);
    CHECK(pool->release(a.data) == ReleaseStatus::Ok);
  }
  CHECK(pool->stats().arenaBytes == carved && pool->stats().purgedBytes == purged);
  // A pool that never decays keeps its free spans resident, as it was told.
  auto keeping = spanPool(PoolOptions::kNoDecay);
  Allocation kept = keeping->alloc(kMiB);
  CHECK(kept.status == AllocStatus::Ok);
  std::memset(kept.data, 1, kMiB);
  CHECK(keeping->release(kept.data) == ReleaseStatus::Ok);
  Allocation grown = keeping->alloc(4 * kMiB);
  CHECK(grown.status == AllocStatus::Ok && keeping->stats().purgedBytes == 0);
  CHECK(keeping->release(grown.data) == ReleaseStatus::Ok);
}

TEST(a_block_the_os_maps_beside_the_arena_gives_back_the_free_spans_and_a_loop_that_reuses_them_keeps_them) {
  // A program that frees a large block and asks for a larger one than any class (an image rotated into a bigger
  // one): glibc unmaps the first; the pool gives its free spans back as the OS maps the second, rather than
  // holding both until decay. Once memory so given back is taken again, the program is a loop: it keeps them.
  constexpr uint64_t kMiB = 1 << 20;
  const uint64_t page = os::pageSize();
  auto pool = spanPool(60000);  // no epoch ends during the test: only the OS's blocks give anything back
  Allocation freed = pool->alloc(16 * kMiB), kept = pool->alloc(kMiB);
  CHECK(freed.status == AllocStatus::Ok && kept.status == AllocStatus::Ok);
  std::memset(freed.data, 1, 16 * kMiB);
  std::memset(kept.data, 9, kMiB);
  CHECK(pool->release(freed.data) == ReleaseStatus::Ok);
  const uint64_t purged0 = pool->stats().purgedBytes;
  Allocation large = pool->alloc(65 * kMiB);  // past the largest class (64 MiB): mapped by the OS
  CHECK(large.status == AllocStatus::Ok && large.route == Route::OsOversize);
  CHECK(pool->stats().purgedBytes - purged0 >= 16 * kMiB);
  CHECK(residentPages(freed.data, 16 * kMiB) <= 1);
  for (uint64_t i = 0; i < kMiB; ++i) CHECK(static_cast<const unsigned char*>(kept.data)[i] == 9);
  std::memset(large.data, 2, 65 * kMiB);
  CHECK(pool->release(large.data) == ReleaseStatus::Ok);
  // The same again, in a loop: the first turn takes the given-back span again, and from then on it stays.
  const uint64_t purged1 = pool->stats().purgedBytes;
  for (int step = 0; step < 4; ++step) {
    Allocation a = pool->alloc(16 * kMiB);
    CHECK(a.status == AllocStatus::Ok);
    std::memset(a.data, step, 16 * kMiB);
    CHECK(pool->release(a.data) == ReleaseStatus::Ok);
    Allocation b = pool->alloc(65 * kMiB);
    CHECK(b.status == AllocStatus::Ok && b.route == Route::OsOversize);
    CHECK(residentPages(a.data, 16 * kMiB) * page + 2 * page >= 16 * kMiB);
    CHECK(pool->release(b.data) == ReleaseStatus::Ok);
  }
  CHECK(pool->stats().purgedBytes == purged1);
  CHECK(pool->release(kept.data) == ReleaseStatus::Ok);
  // A block the OS maps when the reservation is spent (a fallback) gives back as well.
  auto small = spanPool(60000, 8 * kMiB);
  Allocation first = small->alloc(6 * kMiB);
  CHECK(first.status == AllocStatus::Ok);
  std::memset(first.data, 1, 6 * kMiB);
  CHECK(small->release(first.data) == ReleaseStatus::Ok);
  Allocation fallback = small->alloc(12 * kMiB);
  CHECK(fallback.status == AllocStatus::Ok && fallback.route == Route::OsFallback);
  CHECK(small->stats().purgedBytes >= 6 * kMiB && residentPages(first.data, 6 * kMiB) <= 1);
  CHECK(small->release(fallback.data) == ReleaseStatus::Ok);
  // A pool that never decays keeps its free spans resident, as it was told.
  auto keeping = spanPool(PoolOptions::kNoDecay);
  Allocation held = keeping->alloc(4 * kMiB);
  CHECK(held.status == AllocStatus::Ok);
  std::memset(held.data, 1, 4 * kMiB);
  CHECK(keeping->release(held.data) == ReleaseStatus::Ok);
  Allocation beside = keeping->alloc(65 * kMiB);
  CHECK(beside.status == AllocStatus::Ok && keeping->stats().purgedBytes == 0);
  CHECK(keeping->release(beside.data) == ReleaseStatus::Ok);
}

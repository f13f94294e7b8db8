// Time-shared blocks (issue 13): plans whose blocks share memory are served with no two live blocks
// overlapping, however far the run departs from the plan, and serve every trained pattern exactly.
#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "check.h"
#include "core/pool.h"
#include "train/share.h"

using namespace tp;

namespace {

// One pattern: an inference-like pass, tensors of a few sizes (scaled by the input's shape) living a few
// steps each. Events in order; an alloc names its tensor, a free the tensor it ends.
struct Event {
  bool alloc;
  uint32_t tensor;
};
struct Pattern {
  std::vector<uint64_t> sizes;  // per tensor
  std::vector<Event> events;
};

Pattern makePattern(std::mt19937_64& rng, double scale, size_t tensors) {
  static const uint64_t kBase[] = {4096, 12288, 65536, 200000, 1 << 20, 3 << 20, 300, 40000};
  Pattern p;
  std::vector<uint32_t> live;
  for (uint32_t t = 0; t < tensors; ++t) {
    const uint64_t base = kBase[rng() % (sizeof(kBase) / sizeof(kBase[0]))];
    p.sizes.push_back(std::max<uint64_t>(1, static_cast<uint64_t>(static_cast<double>(base) * scale)));
    p.events.push_back({true, t});
    live.push_back(t);
    while (live.size() > 6 || (live.size() > 1 && rng() % 3 == 0)) {
      const size_t i = rng() % live.size();
      p.events.push_back({false, live[i]});
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  for (uint32_t t : live) p.events.push_back({false, t});
  return p;
}

// Trains one time-shared plan on the patterns, one after another, one schedule per pattern.
PlanSpec trainShared(const std::vector<Pattern>& patterns) {
  std::vector<double> sizes, starts, ends;
  std::vector<uint64_t> iterationStarts;
  double time = 0;
  for (const Pattern& p : patterns) {
    iterationStarts.push_back(sizes.size());
    const size_t first = sizes.size();
    sizes.resize(first + p.sizes.size());
    starts.resize(sizes.size());
    ends.resize(sizes.size());
    for (const Event& e : p.events) {
      if (e.alloc) {
        sizes[first + e.tensor] = static_cast<double>(p.sizes[e.tensor]);
        starts[first + e.tensor] = time++;
      } else {
        ends[first + e.tensor] = time++;
      }
    }
  }
  TrainInput input{sizes.data(), starts.data(), ends.data(), sizes.size(), 512, TrainOrder::AllocTime};
  SharedResult result = trainTimeShared(input);
  CHECK(result.ok);
  result.plan.iterationStarts = iterationStarts;
  return result.plan;
}

std::shared_ptr<Pool> makePool(const PlanSpec& plan, Growth growth = Growth::Off) {
  PoolOptions options;
  options.growth = growth;
  options.growReserve = growth == Growth::Off ? 0 : uint64_t{64} << 20;
  options.arena.prefault = false;
  std::string error;
  auto pool = Pool::create(plan, options, &error);
  if (!pool) std::fprintf(stderr, "pool: %s\n", error.c_str());
  CHECK(pool != nullptr);
  return pool;
}

// The shadow: live ranges by start (an independent map), and a fill byte per live block checked at release.
class Shadow {
 public:
  void alloc(void* p, uint64_t bytes, uint8_t fill) {
    const uintptr_t start = reinterpret_cast<uintptr_t>(p), end = start + bytes;
    CHECK(start % 64 == 0);
    auto next = live_.lower_bound(start);
    CHECK(next == live_.end() || next->first >= end);
    CHECK(next == live_.begin() || std::prev(next)->second.end <= start);
    live_[start] = {end, fill};
    std::memset(p, fill, std::min<uint64_t>(bytes, 4096));
    if (bytes > 4096) std::memset(static_cast<char*>(p) + bytes - 4096, fill, 4096);
  }
  void release(void* p, uint64_t bytes) {
    auto it = live_.find(reinterpret_cast<uintptr_t>(p));
    CHECK(it != live_.end());
    const auto* b = static_cast<const uint8_t*>(p);
    for (uint64_t i = 0; i < std::min<uint64_t>(bytes, 4096); ++i) CHECK(b[i] == it->second.fill);
    for (uint64_t i = bytes > 4096 ? bytes - 4096 : bytes; i < bytes; ++i) CHECK(b[i] == it->second.fill);
    live_.erase(it);
  }

 private:
  struct Range {
    uintptr_t end;
    uint8_t fill;
  };
  std::map<uintptr_t, Range> live_;
};

// Runs a pattern's events through the pool (with `extra` applied), returning the OS fallbacks it took.
uint64_t run(Pool& pool, Shadow& shadow, const Pattern& p, std::mt19937_64& rng, int departure) {
  const uint64_t before = pool.stats().osFallbacks;
  std::vector<void*> data(p.sizes.size(), nullptr);
  std::vector<uint64_t> bytes(p.sizes.size(), 0);
  std::vector<Event> events = p.events;
  if (departure == 1) {  // reordered: neighbouring allocations swap places (their frees keep theirs)
    for (size_t i = 0; i + 1 < events.size(); ++i) {
      if (events[i].alloc && events[i + 1].alloc && rng() % 2) std::swap(events[i], events[i + 1]);
    }
  }
  std::vector<std::pair<void*, uint64_t>> extras;
  for (const Event& e : events) {
    if (e.alloc) {
      uint64_t size = p.sizes[e.tensor];
      if (departure == 2 && rng() % 4 == 0) size = size * 3 / 2 + 1;  // changed sizes
      Allocation a = pool.alloc(size);
      CHECK(a.status == AllocStatus::Ok);
      shadow.alloc(a.data, size, static_cast<uint8_t>(rng()));
      data[e.tensor] = a.data;
      bytes[e.tensor] = size;
      if (departure == 3 && rng() % 5 == 0) {  // extra allocations, held a while
        const uint64_t extra = 1 + rng() % (2 << 20);
        Allocation x = pool.alloc(extra);
        CHECK(x.status == AllocStatus::Ok);
        shadow.alloc(x.data, extra, static_cast<uint8_t>(rng()));
        extras.push_back({x.data, extra});
      }
    } else {
      shadow.release(data[e.tensor], bytes[e.tensor]);
      CHECK(pool.release(data[e.tensor]) == ReleaseStatus::Ok);
      if (!extras.empty() && rng() % 3 == 0) {
        shadow.release(extras.back().first, extras.back().second);
        CHECK(pool.release(extras.back().first) == ReleaseStatus::Ok);
        extras.pop_back();
      }
    }
  }
  for (auto& [p2, n] : extras) {
    shadow.release(p2, n);
    CHECK(pool.release(p2) == ReleaseStatus::Ok);
  }
  pool.markIteration();
  return pool.stats().osFallbacks - before;
}

}  // namespace

TEST(time_shared_plan_serves_every_trained_shape_exactly_in_any_order) {
  std::mt19937_64 rng(7);
  std::vector<Pattern> shapes;
  for (double scale : {1.0, 2.25, 0.5, 3.1, 0.25, 1.5}) shapes.push_back(makePattern(rng, scale, 120));
  const PlanSpec plan = trainShared(shapes);
  auto pool = makePool(plan);
  Shadow shadow;
  for (int round = 0; round < 30; ++round) {
    const Pattern& p = shapes[rng() % shapes.size()];
    const PoolStats before = pool->stats();
    CHECK(run(*pool, shadow, p, rng, 0) == 0);
    const PoolStats after = pool->stats();
    CHECK(after.scheduleHits - before.scheduleHits == p.sizes.size());
    CHECK(after.borrows == before.borrows);
  }
  // The plan shares memory: its arena is below one block per tensor of the largest shape, summed.
  uint64_t shared = 0;
  for (const PlacedBlock& b : plan.layout) shared = std::max(shared, b.offset + SizeClassPool::strideOf(plan.classes[b.classIndex].size));
  uint64_t sumLargest = 0;
  for (uint64_t s : shapes[3].sizes) sumLargest += SizeClassPool::strideOf(s);
  CHECK(shared < sumLargest);
  for (const ClassStats& c : pool->classStats()) CHECK(c.counters.busy == 0);
}

namespace {

// Ten rounds alternating two trained shapes of 200 tensors, each run departing as `departure` says: per
// round, the allocations served where the schedule put them, and the schedule's misses.
struct RoundCounts {
  uint64_t hits, misses, tensors;
};
std::vector<RoundCounts> alternateShapes(uint64_t seed, int departure) {
  std::mt19937_64 rng(seed);
  std::vector<Pattern> shapes{makePattern(rng, 1.0, 200), makePattern(rng, 0.6, 200)};
  auto pool = makePool(trainShared(shapes));
  Shadow shadow;
  std::vector<RoundCounts> rounds;
  for (int round = 0; round < 10; ++round) {
    const Pattern& p = shapes[round % 2];
    const PoolStats before = pool->stats();
    run(*pool, shadow, p, rng, departure);
    const PoolStats after = pool->stats();
    rounds.push_back({after.scheduleHits - before.scheduleHits, after.scheduleMisses - before.scheduleMisses, p.sizes.size()});
  }
  return rounds;
}

}  // namespace

TEST(allocations_in_another_order_still_take_their_scheduled_blocks) {
  // Threads allocating side by side swap neighbouring allocations: each still finds an entry of its size
  // (the schedule looks ahead), so nearly everything is served where planned; only two allocations of one
  // size swapping blocks can put a block under a later one (measured: 181-200 of 200 here, where without
  // the look-ahead a swapped first allocation lost the whole iteration).
  for (const RoundCounts& r : alternateShapes(5, 1)) CHECK(r.hits * 10 >= r.tensors * 9);
}

TEST(stray_allocations_miss_alone_and_the_iteration_keeps_its_schedule) {
  // A process recorded under the preload library meets allocations its recording did not have (another
  // thread's, a one-off buffer): each one misses, and the allocations after it still take their blocks.
  // Not all of them: an extra, held a while, may lie on memory a later tensor's block shares (measured:
  // 166-197 of 200 here; 1 when the first stray lost the rest of the iteration).
  for (const RoundCounts& r : alternateShapes(9, 3)) {  // an extra allocation of a size never planned after one in five
    CHECK(r.hits * 4 >= r.tensors * 3);
    CHECK(r.misses > 0);  // the extras
  }
}

TEST(a_growing_pool_keeps_long_lived_strays_off_the_layout) {
  // Buffers the recording did not have, allocated at start-up and kept (a runtime's one-off state): on
  // blocks of the layout they would make the scheduled blocks sharing their memory busy in every iteration.
  std::mt19937_64 rng(13);
  std::vector<Pattern> shapes{makePattern(rng, 1.0, 150), makePattern(rng, 0.7, 150)};
  const PlanSpec plan = trainShared(shapes);
  auto pool = makePool(plan, Growth::AfterBorrowing);
  Shadow shadow;
  std::vector<std::pair<void*, uint64_t>> strays;
  for (size_t k = 0; k < 12; ++k) {
    const uint64_t size = shapes[0].sizes[k * 7] - 8;  // no entry of the schedule asks for it
    Allocation a = pool->alloc(size);
    CHECK(a.status == AllocStatus::Ok);
    shadow.alloc(a.data, size, static_cast<uint8_t>(k));
    strays.push_back({a.data, size});
  }
  pool->markIteration();
  for (int round = 0; round < 8; ++round) {
    const Pattern& p = shapes[round % 2];
    // And a stray that recurs, as each iteration's first allocation: the schedule still picks the
    // iteration's schedule by the allocation after it, and the block grown for it once serves it each time.
    const uint64_t recurring = shapes[0].sizes[0] - 8;
    Allocation r = pool->alloc(recurring);
    CHECK(r.status == AllocStatus::Ok);
    shadow.alloc(r.data, recurring, 0xee);
    shadow.release(r.data, recurring);
    CHECK(pool->release(r.data) == ReleaseStatus::Ok);
    const PoolStats before = pool->stats();
    CHECK(run(*pool, shadow, p, rng, 0) == 0);
    const PoolStats after = pool->stats();
    // 82 of 150 when the kept strays took layout blocks; fewer when a stray first in its iteration kept the
    // schedule from being picked by the allocation after it.
    CHECK(after.scheduleHits - before.scheduleHits == p.sizes.size());
  }
  CHECK(pool->stats().grown == strays.size() + 1);
  for (auto& [data, size] : strays) {
    shadow.release(data, size);
    CHECK(pool->release(data) == ReleaseStatus::Ok);
  }
}

TEST(time_shared_blocks_never_overlap_while_live_however_the_run_departs) {
  std::mt19937_64 rng(11);
  std::vector<Pattern> shapes;
  for (double scale : {1.0, 2.0, 0.4}) shapes.push_back(makePattern(rng, scale, 150));
  const PlanSpec plan = trainShared(shapes);
  for (Growth growth : {Growth::Off, Growth::AfterBorrowing}) {
    auto pool = makePool(plan, growth);
    Shadow shadow;
    for (int round = 0; round < 80; ++round) {
      const int departure = static_cast<int>(rng() % 4);
      // A pattern of a shape never trained, now and then.
      if (round % 7 == 6) run(*pool, shadow, makePattern(rng, 1.7, 100), rng, departure);
      else run(*pool, shadow, shapes[rng() % shapes.size()], rng, departure);
    }
    const PoolStats s = pool->stats();
    CHECK(s.liveBlocks == 0 && s.allocs == s.releases);
    uint64_t busy = 0;
    for (const ClassStats& c : pool->classStats()) {
      CHECK(c.counters.freeBlocks == c.counters.blocks);
      busy += c.counters.busy;
    }
    CHECK(busy > 0);  // departures did meet blocks whose memory was in use
  }
}

TEST(time_shared_pool_rejects_bad_releases_and_switches_away_cleanly) {
  std::mt19937_64 rng(3);
  const std::vector<Pattern> shapes{makePattern(rng, 1.0, 60), makePattern(rng, 2.0, 60)};
  const PlanSpec plan = trainShared(shapes);
  auto pool = makePool(plan);
  Allocation a = pool->alloc(shapes[0].sizes[0]);
  CHECK(a.status == AllocStatus::Ok);
  CHECK(pool->release(static_cast<char*>(a.data) + 64) == ReleaseStatus::NotOwned);
  CHECK(pool->release(a.data) == ReleaseStatus::Ok);
  const ReleaseStatus again = pool->release(a.data);
  CHECK(again == ReleaseStatus::NotLive || again == ReleaseStatus::NotOwned);
  // A block live across a switch stays intact; the old arena's free memory is discarded around it.
  Allocation held = pool->alloc(shapes[1].sizes[0]);
  std::memset(held.data, 0x5a, shapes[1].sizes[0]);
  std::string error;
  CHECK(pool->switchPlan(defaultPlan(), &error));
  for (int i = 0; i < 20; ++i) {
    Allocation x = pool->alloc(4096);
    CHECK(x.status == AllocStatus::Ok);
    CHECK(pool->release(x.data) == ReleaseStatus::Ok);
  }
  for (uint64_t i = 0; i < shapes[1].sizes[0]; ++i) CHECK(static_cast<uint8_t*>(held.data)[i] == 0x5a);
  CHECK(pool->release(held.data) == ReleaseStatus::Ok);
}

TEST(layout_validation_names_the_problem) {
  PlanSpec plan;
  plan.interval = 4096;
  plan.classes = {{4096, 2}, {8192, 1}};
  plan.layout = {{0, 0}, {1, 4096 + 64}};
  std::string error;
  SizeClassTable table;
  CHECK(!table.build(plan, &error) && error.find("places 1 blocks of class 0") != std::string::npos);
  plan.layout = {{0, 0}, {0, 100}, {1, 0}};
  CHECK(!table.build(plan, &error) && error.find("not a multiple of 64") != std::string::npos);
  plan.layout = {{0, 0}, {0, 0}, {1, 0}};
  plan.schedule = {{4096, 0, 2}};
  CHECK(!table.build(plan, &error) && error.find("is not a block of class 0") != std::string::npos);
  plan.schedule = {{4096, 0, 1}};
  plan.iterationStarts = {0, 5};
  CHECK(!table.build(plan, &error) && error.find("iteration start 1") != std::string::npos);
  plan.iterationStarts = {0, 1};
  CHECK(table.build(plan, &error));
}

// A front cache may keep a time-shared block after a use only where the schedule names it again before any
// block sharing its memory: the run wraps to the schedule's start after its end.
TEST(schedule_keeps_a_block_only_where_it_comes_back_before_its_sharers) {
  PlanSpec plan;
  plan.schedule = {{4096, 0, 0}, {4096, 0, 1}, {4096, 0, 0}, {8192, 1, 2}, {8192, 1, 2}};
  Schedules schedules(plan);
  schedules.markKeeps({{1}, {0}, {}});  // blocks 0 and 1 share memory; block 2 shares with none
  Schedules::Cursor cursor;
  schedules.begin(&cursor, 0);
  const ScheduleEntry* entries[5];
  CHECK(schedules.upcoming(cursor, entries, 5) == 5);
  // 0 comes back after 1; 1 only after 0 (wrapping); 0 at the end comes back (wrapping) before 1; 2 always.
  const bool expected[] = {false, false, true, true, true};
  for (size_t i = 0; i < 5; ++i) CHECK(schedules.keeps(entries[i]) == expected[i]);
}

// A cached time-shared block never takes the memory its schedule gives another block: a request whose
// scheduled block lies under a cached one is answered WouldMiss (the cache gives it back first).
TEST(a_cached_time_shared_block_is_given_back_before_a_block_sharing_its_memory_is_taken) {
  PlanSpec plan;
  plan.interval = 4096;
  plan.classes = {{4096, 2}};
  plan.layout = {{0, 0}, {0, 0}};  // both blocks at offset 0
  plan.schedule = {{4096, 0, 0}, {4096, 0, 1}};
  auto pool = makePool(plan);
  Allocation a = pool->alloc(4096);
  CHECK(a.status == AllocStatus::Ok);
  CHECK(!a.cacheable);  // block 1 takes its memory before block 0 comes back
  const CachedOp intoCache{a.data, 0};
  pool->applyCached(&intoCache, 1);  // a cache holds it anyway
  Allocation b = pool->alloc(4096, 0);
  CHECK(b.status == AllocStatus::WouldMiss);
  CHECK(b.classIndex == 0);
  CHECK(pool->returnCached(a.data) == ReleaseStatus::Ok);
  b = pool->alloc(4096, -1);
  CHECK(b.status == AllocStatus::Ok && b.data == a.data);  // block 1, at the same offset
  CHECK(pool->stats().scheduleHits == 2);
  CHECK(pool->release(b.data) == ReleaseStatus::Ok);
}

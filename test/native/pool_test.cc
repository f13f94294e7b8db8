// Native tests of the size classes, the arena and the pool. They run under ASan + UBSan through
// scripts/sanitize.sh, which is where most of their value lies: every path of the core is exercised here.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <chrono>
#include <thread>
#include <unordered_map>
#include <vector>

#include "check.h"
#include "pool_helpers.h"
#include "os/os.h"
#include "core/pool.h"
#include "core/mix.h"
#include "core/schedule.h"

using namespace tp;

namespace {

PlanSpec smallPlan() {
  PlanSpec plan;
  plan.interval = 4096;
  plan.classes = {{4096, 16}, {8192, 8}, {65536, 8}, {1 << 20, 6}, {16 << 20, 2}};
  return plan;
}

std::shared_ptr<Pool> makePool(const PlanSpec& plan, bool grow = false, uint64_t growReserve = 0) {
  PoolOptions options;
  options.growth = grow ? Growth::BeforeBorrowing : Growth::Off;
  options.growReserve = growReserve;
  std::string error;
  auto pool = Pool::create(plan, options, &error);
  if (!pool) std::fprintf(stderr, "pool: %s\n", error.c_str());
  CHECK(pool != nullptr);
  return pool;
}

// Writes a pattern derived from `seed` into a block: every byte of a small block; for a large one the first
// and last 256 bytes and one byte per 64 KiB. Overlaps are proven absent separately (LiveRanges); the
// pattern shows that nothing else (headers, another block, an unmap) touched the block's contents.
template <typename Visit>
void forPatternBytes(uint64_t bytes, Visit visit) {
  if (bytes <= 65536) {
    for (uint64_t i = 0; i < bytes; ++i) visit(i);
    return;
  }
  for (uint64_t i = 0; i < 256; ++i) {
    visit(i);
    visit(bytes - 1 - i);
  }
  for (uint64_t i = 256; i < bytes; i += 65536) visit(i);
}

// The address ranges of the live blocks: insert fails when a new block overlaps a live one.
class LiveRanges {
 public:
  bool insert(const void* p, uint64_t bytes) {
    const uintptr_t start = reinterpret_cast<uintptr_t>(p), end = start + bytes;
    auto next = ranges_.lower_bound(start);
    if (next != ranges_.end() && next->first < end) return false;
    if (next != ranges_.begin() && std::prev(next)->second > start) return false;
    ranges_.emplace(start, end);
    return true;
  }
  void erase(const void* p) { ranges_.erase(reinterpret_cast<uintptr_t>(p)); }

 private:
  std::map<uintptr_t, uintptr_t> ranges_;
};
uint8_t patternByte(uint64_t seed, uint64_t i) { return static_cast<uint8_t>((seed * 0x9E3779B97F4A7C15ull + i * 131) >> 56); }
void fillPattern(void* p, uint64_t bytes, uint64_t seed) {
  auto* b = static_cast<uint8_t*>(p);
  forPatternBytes(bytes, [&](uint64_t i) { b[i] = patternByte(seed, i); });
}
bool checkPattern(const void* p, uint64_t bytes, uint64_t seed) {
  auto* b = static_cast<const uint8_t*>(p);
  bool ok = true;
  forPatternBytes(bytes, [&](uint64_t i) { ok = ok && b[i] == patternByte(seed, i); });
  return ok;
}

// Sizes log-uniform from 1 byte to `max`.
uint64_t randomSize(std::mt19937_64& rng, uint64_t max) {
  std::uniform_real_distribution<double> exponent(0.0, std::log2(static_cast<double>(max)));
  return std::max<uint64_t>(1, static_cast<uint64_t>(std::exp2(exponent(rng))));
}

}  // namespace

TEST(classes_lookup_matches_brute_force) {
  std::vector<PlanSpec> plans = {smallPlan(), defaultPlan()};
  PlanSpec odd;
  odd.interval = 512;
  odd.classes = {{512, 1}, {1536, 1}, {2048, 1}, {1 << 19, 1}, {3 << 19, 1}};
  plans.push_back(odd);
  PlanSpec dense;  // thousands of classes in the table's first granule, capped by a far larger last class
  for (uint64_t size = 64; size <= 64 * 3000; size += 64) dense.classes.push_back({size, 0});
  dense.classes.push_back({uint64_t{1} << 30, 0});
  plans.push_back(dense);
  for (const PlanSpec& plan : plans) {
    SizeClassTable table;
    std::string error;
    CHECK(table.build(plan, &error));
    std::mt19937_64 rng(7);
    for (int n = 0; n < 200000; ++n) {
      uint64_t bytes = randomSize(rng, table.largest() * 2);
      int expected = -1;
      for (size_t i = 0; i < table.count(); ++i) {
        if (table.size(i) >= bytes) {
          expected = static_cast<int>(i);
          break;
        }
      }
      CHECK(table.firstFitting(bytes) == expected);
    }
    for (size_t i = 0; i < table.count(); ++i) {  // each class's own size, and a byte either side of it
      CHECK(table.firstFitting(table.size(i)) == static_cast<int>(i));
      const size_t below = i > 0 && table.size(i - 1) == table.size(i) - 1 ? i - 1 : i;
      if (table.size(i) > 1) CHECK(table.firstFitting(table.size(i) - 1) == static_cast<int>(below));
      if (i + 1 < table.count()) CHECK(table.firstFitting(table.size(i) + 1) == static_cast<int>(i + 1));
    }
    CHECK(table.firstFitting(0) == -1);
    CHECK(table.firstFitting(table.largest()) == static_cast<int>(table.count() - 1));
    CHECK(table.firstFitting(table.largest() + 1) == -1);
  }
}

TEST(classes_own_class_follows_the_interval) {
  SizeClassTable table;
  std::string error;
  CHECK(table.build(smallPlan(), &error));
  CHECK(table.isOwn(0, 1) && table.isOwn(0, 4096));
  CHECK(!table.isOwn(1, 4096) && table.isOwn(1, 4097));
  CHECK(!table.isOwn(2, 8193));  // own class would be 12288, which the plan does not have
  SizeClassTable defaults;
  CHECK(defaults.build(defaultPlan(), &error));
  CHECK(defaults.interval() == 0 && defaults.isOwn(static_cast<size_t>(defaults.firstFitting(1000)), 1000));
}

TEST(plan_validation_names_the_problem) {
  SizeClassTable table;
  std::string error;
  PlanSpec plan;
  CHECK(!table.build(plan, &error) && error.find("at least one class") != std::string::npos);
  plan.interval = 4096;
  plan.classes = {{4096, 1}, {5000, 1}};
  CHECK(!table.build(plan, &error) && error.find("not a multiple") != std::string::npos);
  plan.classes = {{4096, 1}, {4096, 2}};
  CHECK(!table.build(plan, &error) && error.find("twice") != std::string::npos);
  plan.classes = {{0, 1}};
  CHECK(!table.build(plan, &error) && error.find("class 0") != std::string::npos);
  plan.classes = {{4096, uint64_t{1} << 40}};
  PoolOptions options;
  CHECK(Pool::create(plan, options, &error) == nullptr && error.find("128 TiB") != std::string::npos);
  plan.classes = {{4096, 1}};
  plan.schedule = {{4096, 0}, {4096, 0}};
  plan.iterationStarts = {0, 1};
  plan.cycle = 3;
  CHECK(!table.build(plan, &error) && error.find("cycle") != std::string::npos);
  plan.cycle = 0;
  CHECK(!table.build(plan, &error) && error.find("cycle") != std::string::npos);
}

TEST(past_the_trained_iterations_the_last_cycle_of_them_repeats_in_turn) {
  PlanSpec plan;
  plan.interval = 4096;
  plan.classes = {{4096, 1}, {8192, 1}, {12288, 1}};
  plan.schedule = {{4096, 0}, {8192, 1}, {12288, 2}};  // one entry per iteration: entry k starts iteration k
  plan.iterationStarts = {0, 1, 2};
  const uint64_t expected[3][9] = {{0, 1, 2, 2, 2, 2, 2, 2, 2}, {0, 1, 2, 1, 2, 1, 2, 1, 2}, {0, 1, 2, 0, 1, 2, 0, 1, 2}};
  for (uint64_t cycle = 1; cycle <= 3; ++cycle) {
    plan.cycle = cycle;
    Schedules schedules(plan);
    Schedules::Cursor cursor;
    for (uint64_t iteration = 0; iteration < 9; ++iteration) {
      schedules.begin(&cursor, iteration);
      CHECK(cursor.at == expected[cycle - 1][iteration]);
    }
  }
}

TEST(past_the_trained_iterations_a_run_goes_on_with_what_followed_the_pattern_that_ended) {
  // Trained: a creation step, then two shapes in turn, twice (one allocation each, told apart by size).
  PlanSpec plan;
  plan.interval = 4096;
  plan.classes = {{4096, 1}, {8192, 1}, {12288, 1}};
  plan.schedule = {{4096, 0}, {8192, 1}, {12288, 2}, {8192, 1}, {12288, 2}};
  plan.iterationStarts = {0, 1, 2, 3, 4};
  Schedules schedules(plan);
  Schedules::Cursor cursor;
  schedules.begin(&cursor, 5, mix64(12288), 1);  // the second shape ended: the first follows
  CHECK(cursor.at == 3);
  schedules.begin(&cursor, 6, mix64(8192), 1);  // then the second
  CHECK(cursor.at == 4);
  schedules.begin(&cursor, 7, mix64(4096) + mix64(8192), 2);  // a pattern never trained: the last schedule
  CHECK(cursor.at == 4);
}

TEST(a_start_up_in_another_order_keeps_its_own_schedule) {
  // Trained: a start-up of 4096, 8192, 8192; then a run that opens with 8192.
  PlanSpec plan;
  plan.interval = 4096;
  plan.classes = {{4096, 1}, {8192, 3}, {12288, 1}};
  plan.schedule = {{4096, 0, 0}, {8192, 1, 1}, {8192, 1, 2}, {8192, 1, 3}, {12288, 2, 4}};  // block: its position
  plan.iterationStarts = {0, 3};
  Schedules schedules(plan);
  const auto startUp = [&](bool isStartUp) {
    Schedules::Cursor cursor;
    schedules.begin(&cursor, 0);
    cursor.startUp = isStartUp;
    std::vector<uint32_t> taken;
    for (uint64_t bytes : {8192, 8192, 4096}) {
      const ScheduleEntry* entry = schedules.next(&cursor, bytes);
      taken.push_back(entry ? entry->block : ScheduleEntry::kAnyBlock);
    }
    return taken;
  };
  // Outside a start-up (a plan switched to mid-run) the first size picks the run that opens with it.
  CHECK(startUp(false)[0] == 3);
  const std::vector<uint32_t> own = startUp(true);
  CHECK(own.size() == 3 && own[0] == 1 && own[1] == 2 && own[2] == 0);
}

TEST(an_allocation_the_run_does_not_make_is_stepped_over) {
  // Trained on a recording with a one-off buffer at entry 3 (a start-up's) that this run does not make, or
  // makes late; the run follows the schedule to its end, every allocation on its own entry, in step again.
  constexpr uint32_t kEntries = 60;
  PlanSpec plan;
  plan.interval = 4096;
  for (uint32_t k = 0; k < kEntries; ++k) {
    plan.classes.push_back({4096 * (k + 1), 1});
    plan.schedule.push_back({4096 * (k + 1), k, k});
  }
  Schedules schedules(plan);
  // Entry 3 missing; or coming late, after 30 others (a reordering longer than the 16 that step over it).
  for (uint32_t late : {UINT32_MAX, 33u}) {
    std::vector<uint32_t> order;
    for (uint32_t k = 0; k < kEntries; ++k) {
      if (k != 3) order.push_back(k);
      if (k == late) order.push_back(3);
    }
    for (bool startUp : {true, false}) {
      Schedules::Cursor cursor;
      schedules.begin(&cursor, 0);
      cursor.startUp = startUp;
      for (uint32_t k : order) {
        const ScheduleEntry* entry = schedules.next(&cursor, 4096 * (k + 1));
        CHECK(entry != nullptr && entry->block == k);
      }
      CHECK(cursor.at == kEntries && cursor.ahead.empty() && !cursor.lost);
      CHECK(cursor.passed.size() == (late == UINT32_MAX ? 1u : 0u));
    }
  }
}

TEST(default_classes_cover_64_bytes_to_64_mib_with_bounded_waste) {
  PlanSpec plan = defaultPlan();
  CHECK(plan.classes.front().size == 64 && plan.classes.back().size == (uint64_t{64} << 20));
  for (size_t i = 1; i < plan.classes.size(); ++i) {
    CHECK(plan.classes[i].size > plan.classes[i - 1].size);
    // The largest request a class serves that the previous class could not is prev + 1.
    const double waste = double(plan.classes[i].size - plan.classes[i - 1].size - 1) / double(plan.classes[i].size);
    CHECK(waste < 0.25 || plan.classes[i - 1].size == 64);
  }
}

TEST(property_random_alloc_release_never_overlaps) {
  auto pool = makePool(smallPlan());
  std::mt19937_64 rng(12345);
  struct Live {
    void* data;
    uint64_t bytes;
    uint64_t seed;
  };
  std::vector<Live> live;
  LiveRanges ranges;
  uint64_t routes[5] = {};
  for (uint64_t op = 0; op < 100000; ++op) {
    const bool doAlloc = live.empty() || (live.size() < 48 && rng() % 100 < 55);
    if (doAlloc) {
      const uint64_t bytes = randomSize(rng, 40ull << 20);
      Allocation a = pool->alloc(bytes);
      CHECK(a.status == AllocStatus::Ok);
      CHECK(reinterpret_cast<uintptr_t>(a.data) % 64 == 0);
      routes[static_cast<int>(a.route)]++;
      CHECK(ranges.insert(a.data, bytes));
      fillPattern(a.data, bytes, op);
      live.push_back({a.data, bytes, op});
    } else {
      const size_t i = rng() % live.size();
      CHECK(checkPattern(live[i].data, live[i].bytes, live[i].seed));
      CHECK(pool->liveSize(live[i].data) == live[i].bytes);
      CHECK(pool->release(live[i].data) == ReleaseStatus::Ok);
      ranges.erase(live[i].data);
      live[i] = live.back();
      live.pop_back();
    }
  }
  for (const Live& l : live) {
    CHECK(checkPattern(l.data, l.bytes, l.seed));
    CHECK(pool->release(l.data) == ReleaseStatus::Ok);
  }
  // Every route was taken.
  CHECK(routes[static_cast<int>(Route::Own)] > 0 && routes[static_cast<int>(Route::Borrowed)] > 0);
  CHECK(routes[static_cast<int>(Route::OsFallback)] > 0 && routes[static_cast<int>(Route::OsOversize)] > 0);
  PoolStats s = pool->stats();
  CHECK(s.allocs == s.releases && s.liveBlocks == 0 && s.bytesLive == 0 && s.osLiveBlocks == 0);
  CHECK(s.hits + s.borrows + s.osFallbacks + s.osOversize == s.allocs);
  for (const ClassStats& c : pool->classStats()) CHECK(c.counters.freeBlocks == c.counters.blocks);
}

TEST(growing_pool_carves_then_falls_back_to_the_os) {
  auto pool = makePool(defaultPlan(), true, 1 << 20);  // 1 MiB of room to grow
  Allocation a = pool->alloc(300000);
  CHECK(a.status == AllocStatus::Ok && a.route == Route::Grown);
  CHECK(pool->release(a.data) == ReleaseStatus::Ok);
  Allocation b = pool->alloc(300000);
  CHECK(b.route == Route::Own && b.data == a.data);  // reused, not carved again
  std::vector<void*> more;
  Allocation c;
  do {
    c = pool->alloc(300000);
    CHECK(c.status == AllocStatus::Ok);
    more.push_back(c.data);
  } while (c.route == Route::Grown);
  CHECK(c.route == Route::OsFallback);  // the reservation is exhausted
  for (void* p : more) CHECK(pool->release(p) == ReleaseStatus::Ok);
  CHECK(pool->release(b.data) == ReleaseStatus::Ok);
  CHECK(pool->alloc(65ull << 20).route == Route::OsOversize);
}

TEST(default_classes_borrow_a_block_up_to_four_classes_up_before_growing) {
  auto pool = makePool(defaultPlan(), true, 64 << 20);
  Allocation big = pool->alloc(4 << 20);
  CHECK(big.route == Route::Grown);
  CHECK(pool->release(big.data) == ReleaseStatus::Ok);
  Allocation near = pool->alloc(2200000);  // class 2.5 MiB, empty; 4 MiB is three classes up: lent
  CHECK(near.route == Route::Borrowed && near.data == big.data && pool->stats().grown == 1);
  CHECK(pool->release(near.data) == ReleaseStatus::Ok);
  Allocation far = pool->alloc(1500000);  // class 1.5 MiB: 4 MiB is six classes up, so the class grows
  CHECK(far.route == Route::Grown && far.data != big.data && pool->stats().grown == 2);
  Allocation own = pool->alloc(4 << 20);  // the 4 MiB block went back to its class
  CHECK(own.route == Route::Own && own.data == big.data);
  Allocation farther = pool->alloc(1500000);  // its class's one block is live, 4 MiB too: grows again
  CHECK(farther.route == Route::Grown && pool->stats().grown == 3);
  for (const Allocation& x : {far, own, farther}) CHECK(pool->release(x.data) == ReleaseStatus::Ok);
}

TEST(a_growing_trained_plan_borrows_as_trained_and_grows_only_when_nothing_fits) {
  // Sparse classes, as training makes them: 4096 B requests have no class of their own.
  PlanSpec plan;
  plan.interval = 4096;
  plan.classes = {{8192, 1}, {1 << 20, 1}};
  PoolOptions options;
  options.growth = Growth::AfterBorrowing;
  options.growReserve = 8 << 20;
  std::string error;
  auto pool = Pool::create(plan, options, &error);
  CHECK(pool != nullptr);
  Allocation a = pool->alloc(4096);  // the free 8192 block fits: borrowed, nothing carved
  CHECK(a.route == Route::Borrowed);
  Allocation b = pool->alloc(4096);  // the 1 MiB block is free: borrowed too
  CHECK(b.route == Route::Borrowed);
  Allocation c = pool->alloc(4096);  // nothing free fits: the smallest fitting class grows
  CHECK(c.route == Route::Borrowed && pool->stats().grown == 1);
  for (const Allocation& x : {a, b, c}) CHECK(pool->release(x.data) == ReleaseStatus::Ok);
  for (int round = 0; round < 100; ++round) {  // a steady pattern reuses what is there: no more growth
    Allocation x = pool->alloc(4096), y = pool->alloc(4096), z = pool->alloc(4096);
    for (const Allocation& w : {x, y, z}) CHECK(pool->release(w.data) == ReleaseStatus::Ok);
  }
  CHECK(pool->stats().grown == 1);
  Allocation own = pool->alloc(8000);  // an own class whose block is free: taken
  CHECK(own.route == Route::Own);
  CHECK(pool->release(own.data) == ReleaseStatus::Ok);
}

TEST(bad_releases_change_nothing) {
  auto pool = makePool(smallPlan());
  Allocation a = pool->alloc(5000);
  Allocation os = pool->alloc(64ull << 20);
  const PoolStats before = pool->stats();
  char onStack[256];
  std::vector<char> onHeap(1 << 16);
  CHECK(pool->release(onStack + 64) == ReleaseStatus::NotOwned);
  CHECK(pool->release(onHeap.data()) == ReleaseStatus::NotOwned);
  CHECK(pool->release(nullptr) == ReleaseStatus::NotOwned);
  CHECK(pool->release(static_cast<char*>(a.data) + 64) == ReleaseStatus::NotOwned);   // inside a block
  CHECK(pool->release(static_cast<char*>(os.data) + 64) == ReleaseStatus::NotOwned);  // inside an OS block
  CHECK(pool->releaseIfSerial(a.data, a.serial + 1000) == ReleaseStatus::Stale);
  const PoolStats after = pool->stats();
  CHECK(std::memcmp(&before, &after, sizeof before) == 0);

  auto other = makePool(smallPlan());
  Allocation foreign = other->alloc(5000);
  CHECK(pool->release(foreign.data) == ReleaseStatus::NotOwned);
  CHECK(other->release(foreign.data) == ReleaseStatus::Ok);

  CHECK(pool->release(a.data) == ReleaseStatus::Ok);
  CHECK(pool->release(a.data) == ReleaseStatus::NotLive);
  CHECK(pool->releaseIfSerial(a.data, a.serial) == ReleaseStatus::NotLive);
  CHECK(pool->release(os.data) == ReleaseStatus::Ok);
  CHECK(pool->release(os.data) == ReleaseStatus::NotOwned);  // gone back to the OS: no longer ours
}

TEST(finalizer_release_only_takes_its_own_allocation) {
  auto pool = makePool(smallPlan());
  Allocation first = pool->alloc(4096);
  CHECK(pool->release(first.data) == ReleaseStatus::Ok);
  Allocation second = pool->alloc(4096);
  CHECK(second.data == first.data && second.serial != first.serial);  // LIFO reuse of the same block
  CHECK(pool->releaseIfSerial(first.data, first.serial) == ReleaseStatus::Stale);
  CHECK(pool->liveSize(second.data) == 4096);
  CHECK(pool->releaseIfSerial(second.data, second.serial) == ReleaseStatus::Ok);
  CHECK(pool->stats().finalized == 1);
}

TEST(close_keeps_arenas_until_the_last_block_returns) {
  auto pool = makePool(smallPlan());
  Allocation a = pool->alloc(4096);
  fillPattern(a.data, 4096, 1);
  pool->close();
  CHECK(pool->alloc(4096).status == AllocStatus::Closed);
  CHECK(pool->stats().arenas == 1);
  CHECK(checkPattern(a.data, 4096, 1));  // still mapped: ASan would flag a read of unmapped memory
  CHECK(pool->release(a.data) == ReleaseStatus::Ok);
  CHECK(pool->stats().arenas == 0 && pool->stats().arenaBytes == 0);
  CHECK(pool->release(a.data) == ReleaseStatus::NotOwned);
  // What a handle still asks after its refused alloc answers without an arena to read.
  Pool::Upcoming upcoming[Pool::kUpcomingMax];
  CHECK(pool->upcoming(upcoming, Pool::kUpcomingMax) == -1);
  CHECK(pool->classStats().empty() && pool->interval() == 0);
  pool->close();  // idempotent
}

TEST(prefaulted_blocks_take_no_page_faults) {
  PlanSpec plan;
  plan.interval = 1 << 20;
  plan.classes = {{16 << 20, 8}};
  auto pool = makePool(plan);
  const os::FaultCounts before = os::threadFaults();
  for (int round = 0; round < 4; ++round) {
    void* blocks[8];
    for (void*& b : blocks) {
      b = pool->alloc(16 << 20).data;
      for (size_t off = 0; off < (16u << 20); off += 4096) static_cast<char*>(b)[off] = 1;
    }
    for (void* b : blocks) CHECK(pool->release(b) == ReleaseStatus::Ok);
  }
  const os::FaultCounts after = os::threadFaults();
  // 4 x 8 x 4096 pages touched; a fresh mapping would take 131072 faults.
  CHECK(after.minor - before.minor < 64);
}

TEST(threads_share_one_pool_safely) {
  auto pool = makePool(smallPlan());
  std::atomic<bool> failed{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<uint64_t>(t) + 99);
      std::vector<std::pair<void*, uint64_t>> mine;
      for (int op = 0; op < 20000; ++op) {
        if (mine.empty() || rng() % 2) {
          const uint64_t bytes = randomSize(rng, 2 << 20);
          Allocation a = pool->alloc(bytes);
          if (a.status != AllocStatus::Ok) failed = true;
          fillPattern(a.data, bytes, static_cast<uint64_t>(t) << 32 | static_cast<uint64_t>(op));
          mine.push_back({a.data, static_cast<uint64_t>(t) << 32 | static_cast<uint64_t>(op)});
        } else {
          auto [p, seed] = mine.back();
          mine.pop_back();
          if (!checkPattern(p, pool->liveSize(p), seed)) failed = true;
          if (pool->release(p) != ReleaseStatus::Ok) failed = true;
        }
      }
      for (auto [p, seed] : mine) {
        if (!checkPattern(p, pool->liveSize(p), seed) || pool->release(p) != ReleaseStatus::Ok) failed = true;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  CHECK(!failed);
  CHECK(pool->stats().liveBlocks == 0);
}

TEST(locked_arena_is_resident_or_names_rlimit_memlock) {
  PlanSpec plan;
  plan.interval = 4096;
  plan.classes = {{1 << 20, 4}};
  PoolOptions options;
  options.arena.lock = true;
  std::string error;
  auto pool = Pool::create(plan, options, &error);
  if (pool) {
    CHECK(pool->stats().committedBytes >= 4u << 20);
  } else {
    CHECK(error.find("RLIMIT_MEMLOCK") != std::string::npos);
  }
}

TEST(recording_names_buffers_by_serial_and_marks_iterations) {
  auto pool = makePool(smallPlan());
  Allocation before = pool->alloc(100);  // allocated before recording: its release is still recorded
  pool->startRecording(1000);
  Allocation a = pool->alloc(5000);
  Allocation b = pool->alloc(70000);
  CHECK(pool->release(a.data) == ReleaseStatus::Ok);
  IterationSummary ended = pool->markIteration();
  CHECK(ended.allocs == 3 && ended.bytes == 100 + 5000 + 70000 && ended.recorderEnd == 4);
  CHECK(pool->release(before.data) == ReleaseStatus::Ok);
  CHECK(pool->release(b.data) == ReleaseStatus::Ok);
  CHECK(pool->release(b.data) == ReleaseStatus::NotLive);  // a refused release records nothing
  pool->stopRecording();
  pool->alloc(64);  // not recorded
  const std::vector<RecordedEvent> events = pool->copyRecording(0);
  CHECK(events.size() == 6);
  CHECK(events[0].op() == RecordedOp::Alloc && events[0].serial == a.serial && events[0].bytes() == 5000);
  CHECK(events[1].op() == RecordedOp::Alloc && events[1].serial == b.serial && events[1].bytes() == 70000);
  CHECK(events[0].thread() == 0 && events[1].thread() == 0);  // the main thread
  CHECK(events[2].op() == RecordedOp::Release && events[2].serial == a.serial && events[2].payload() == 0);
  CHECK(events[3].op() == RecordedOp::Mark);
  CHECK(events[4].op() == RecordedOp::Release && events[4].serial == before.serial);
  CHECK(events[5].op() == RecordedOp::Release && events[5].serial == b.serial);
  pool->discardRecording(4);
  const RecordingState state = pool->recordingState();
  CHECK(!state.on && !state.truncated && state.begin == 4 && state.end == 6);
  CHECK(pool->copyRecording(0).size() == 2 && pool->copyRecording(5).size() == 1);
}

TEST(recording_numbers_the_allocating_threads) {
  auto pool = makePool(smallPlan());
  pool->startRecording(1000);
  std::vector<void*> blocks;
  std::mutex mu;
  auto allocTwice = [&] {
    for (int i = 0; i < 2; ++i) {
      void* p = pool->alloc(4096).data;
      std::lock_guard<std::mutex> lock(mu);
      blocks.push_back(p);
    }
  };
  // The first thread stays alive until the end, so the second cannot take its pthread_t (and its number).
  std::atomic<int> stage{0};
  std::thread first([&] {
    allocTwice();
    stage = 1;
    while (stage != 2) std::this_thread::yield();
  });
  while (stage != 1) std::this_thread::yield();
  allocTwice();  // the main thread: 0, whenever it comes
  std::thread(allocTwice).join();
  stage = 2;
  first.join();
  for (void* p : blocks) pool->release(p);
  const std::vector<RecordedEvent> events = pool->copyRecording(0);
  std::vector<uint64_t> threads;
  for (const RecordedEvent& e : events) {
    if (e.op() == RecordedOp::Alloc) threads.push_back(e.thread());
  }
  CHECK((threads == std::vector<uint64_t>{1, 1, 0, 0, 2, 2}));
  CHECK(events.back().op() == RecordedOp::Release && events.back().payload() == 0);
}

TEST(recording_stops_at_its_limit) {
  auto pool = makePool(smallPlan());
  pool->startRecording(3);
  for (int i = 0; i < 5; ++i) pool->release(pool->alloc(4096).data);
  const RecordingState state = pool->recordingState();
  CHECK(!state.on && state.truncated && state.end == 3);
}

TEST(iteration_pattern_hash_ignores_order_and_sees_sizes) {
  auto pool = makePool(smallPlan());
  auto iteration = [&](std::vector<uint64_t> sizes) {
    for (uint64_t size : sizes) pool->release(pool->alloc(size).data);
    return pool->markIteration();
  };
  pool->markIteration();
  const IterationSummary x = iteration({100, 5000, 70000});
  const IterationSummary y = iteration({70000, 100, 5000});
  const IterationSummary z = iteration({100, 5001, 69999});  // same count and bytes, other sizes
  CHECK(x.sizeHash == y.sizeHash && x.allocs == y.allocs && x.bytes == y.bytes);
  CHECK(z.bytes == x.bytes && z.sizeHash != x.sizeHash);
}

TEST(switching_plans_keeps_old_blocks_valid_and_unmaps_the_old_arena_when_drained) {
  auto pool = makePool(defaultPlan(), true, 64 << 20);
  LiveRanges live;
  std::vector<std::pair<Allocation, uint64_t>> old;
  for (uint64_t bytes : {100, 5000, 70000, 1 << 20, 3 << 20}) {
    Allocation a = pool->alloc(bytes);
    CHECK(a.status == AllocStatus::Ok && live.insert(a.data, bytes));
    std::memset(a.data, static_cast<int>(bytes & 0xff), bytes);
    old.emplace_back(a, bytes);
  }
  // A free block in the old arena whose pages go back to the OS when it retires.
  Allocation freed = pool->alloc(1 << 20);
  std::memset(freed.data, 0x5a, 1 << 20);
  CHECK(pool->release(freed.data) == ReleaseStatus::Ok);

  std::string error;
  PlanSpec bad;
  bad.interval = 4096;
  bad.classes = {{4000, 1}};  // not a multiple of the interval
  CHECK(!pool->switchPlan(bad, &error) && !error.empty());
  CHECK(pool->stats().generation == 1 && pool->stats().switches == 0);

  CHECK(pool->switchPlan(smallPlan(), &error));
  PoolStats s = pool->stats();
  const uint64_t generation = s.generation;  // above 2: the refused plan used up an id
  CHECK(generation > 1 && s.switches == 1 && s.arenas == 2);
  // Discarded pages read back as zero: the free block's memory went back to the OS.
  CHECK(static_cast<volatile uint8_t*>(freed.data)[4096] == 0);
  for (int i = 0; i < 8; ++i) {
    Allocation a = pool->alloc(4096);
    CHECK(a.status == AllocStatus::Ok && live.insert(a.data, 4096));
    CHECK(pool->release(a.data) == ReleaseStatus::Ok);
    live.erase(a.data);
  }
  CHECK(pool->stats().osFallbacks == 0);
  CHECK(pool->alloc(200 << 20).status == AllocStatus::Ok);  // oversize for the new plan: the OS
  for (auto& [a, bytes] : old) {
    const uint8_t* p = static_cast<const uint8_t*>(a.data);
    CHECK(p[0] == static_cast<uint8_t>(bytes & 0xff) && p[bytes - 1] == static_cast<uint8_t>(bytes & 0xff));
    CHECK(pool->release(a.data) == ReleaseStatus::Ok);
    live.erase(a.data);
  }
  s = pool->stats();
  CHECK(s.arenas == 1 && s.generation == generation);  // the old arena went with its last block
  pool->close();
  CHECK(!pool->switchPlan(smallPlan(), &error) && error == "the pool is closed");
}

TEST(switches_prepared_on_other_threads_install_only_at_marks_while_threads_allocate) {
  auto pool = makePool(defaultPlan());
  std::atomic<bool> failed{false}, done{false};
  std::vector<std::thread> workers;
  for (int t = 0; t < 2; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<uint64_t>(t) + 7);
      std::vector<std::pair<void*, uint64_t>> mine;
      for (uint64_t op = 0; !done || !mine.empty(); ++op) {
        if (!done && (mine.empty() || rng() % 2)) {
          const uint64_t bytes = randomSize(rng, 1 << 20), seed = static_cast<uint64_t>(t) << 40 | op;
          Allocation a = pool->alloc(bytes);
          if (a.status != AllocStatus::Ok) failed = true;
          fillPattern(a.data, bytes, seed);
          mine.push_back({a.data, seed});
        } else {
          auto [p, seed] = mine.back();
          mine.pop_back();
          if (!checkPattern(p, pool->liveSize(p), seed) || pool->release(p) != ReleaseStatus::Ok) failed = true;
        }
      }
    });
  }
  // Preparations race each other and the marks: each mark installs at most the newest one ready.
  uint64_t installed = 0, lastInstalled = 1;
  for (int round = 0; round < 6; ++round) {
    std::vector<std::thread> preparers;
    std::atomic<int> prepared{0};
    for (int k = 0; k < 2; ++k) {
      preparers.emplace_back([&] {
        std::string error;
        if (pool->prepareSwitch(smallPlan(), &error) != 0) prepared++;
        else failed = true;
      });
    }
    for (int marks = 0; marks < 50; ++marks) {
      const IterationSummary s = pool->markIteration();
      if (s.installed) {
        if (s.installed <= lastInstalled) failed = true;  // ids only grow
        lastInstalled = s.installed;
        installed++;
      }
    }
    for (std::thread& p : preparers) p.join();
    CHECK(prepared == 2);
    if (pool->markIteration().installed) installed++;  // what was still waiting
    CHECK(pool->stats().preparedGeneration == 0);
  }
  done = true;
  for (std::thread& w : workers) w.join();
  CHECK(!failed);
  const PoolStats s = pool->stats();
  CHECK(s.switches == installed && installed >= 6 && installed <= 12);
  CHECK(s.liveBlocks == 0 && s.arenas == 1);
  std::string error;
  pool->close();
  CHECK(pool->prepareSwitch(smallPlan(), &error) == 0 && error == "the pool is closed");
  CHECK(pool->stats().reservedBytes == 0);
}

TEST(of_two_preparations_finishing_in_either_order_the_newer_is_installed) {
  // One plan slow to build (100,000 blocks, each header written on a page of its own) started first, one
  // quick started after it: the quick one finishes first. The mark installs the newer (the larger id),
  // whichever finished last.
  auto pool = makePool(smallPlan());
  PlanSpec large;
  large.interval = 4096;
  large.classes = {{4096, 100000}};
  std::atomic<uint64_t> slow{0}, quick{0};
  std::thread first([&] {
    std::string error;
    slow = pool->prepareSwitch(large, &error);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::string error;
  quick = pool->prepareSwitch(smallPlan(), &error);
  first.join();
  CHECK(slow != 0 && quick != 0);
  const IterationSummary s = pool->markIteration();
  CHECK(s.installed == std::max(slow.load(), quick.load()));
  CHECK(pool->markIteration().installed == 0);  // nothing older waits behind it
  pool->close();
}

TEST(a_switch_installed_at_a_mark_discards_the_old_free_pages_only_when_asked) {
  auto pool = makePool(smallPlan());
  Allocation kept = pool->alloc(1 << 20);
  Allocation freed = pool->alloc(1 << 20);
  std::memset(kept.data, 0x11, 1 << 20);
  std::memset(freed.data, 0x5a, 1 << 20);
  CHECK(pool->release(freed.data) == ReleaseStatus::Ok);
  std::string error;
  CHECK(pool->prepareSwitch(smallPlan(), &error) != 0);
  CHECK(pool->markIteration().installed != 0);
  volatile uint8_t* page = static_cast<volatile uint8_t*>(freed.data) + 4096;
  CHECK(*page == 0x5a);  // the mark left the pages alone
  CHECK(pool->discardRetired() >= (1 << 20));
  CHECK(*page == 0);  // given back: reads as zero
  CHECK(pool->discardRetired() == 0);
  CHECK(static_cast<const uint8_t*>(kept.data)[4096] == 0x11);  // a live block is never touched
  CHECK(pool->release(kept.data) == ReleaseStatus::Ok);
  CHECK(pool->stats().arenas == 1);
}

namespace {
std::shared_ptr<Pool> decayingPool(uint64_t decayMs) { return tpt::growingPool(Growth::BeforeBorrowing, decayMs); }
using tpt::allZero;

// `count` blocks of `bytes` allocated, written all through (resident), then freed; their addresses to `blocks`.
void writtenAndFreed(Pool& pool, void** blocks, int count, uint64_t bytes) {
  for (int i = 0; i < count; ++i) {
    blocks[i] = pool.alloc(bytes).data;
    std::memset(blocks[i], 1, bytes);
  }
  for (int i = 0; i < count; ++i) CHECK(pool.release(blocks[i]) == ReleaseStatus::Ok);
}
}  // namespace

TEST(idle_free_blocks_give_their_pages_back_a_bounded_number_per_call_and_then_read_as_zero) {
  auto pool = decayingPool(200);
  constexpr int kBlocks = 100;
  constexpr uint64_t kBytes = 1 << 20;
  std::vector<void*> blocks;
  for (int i = 0; i < kBlocks; ++i) {
    Allocation a = pool->alloc(kBytes);
    CHECK(a.route == Route::Grown && a.zeroed);  // carved, never written: calloc need not write it
    std::memset(a.data, 0xab, pool->liveSize(a.data));
    blocks.push_back(a.data);
  }
  for (void* p : blocks) CHECK(pool->release(p) == ReleaseStatus::Ok);
  // Calls of another class end epochs 250 ms apart: the 100 idle blocks fall due together (at the latest
  // at the second), and each call purges at most PurgeRequest::kBlocksPerTurn of them.
  for (int call = 0; call < 5; ++call) {
    tpt::advanceMs(250);
    const uint64_t before = pool->stats().purgedBlocks;
    Allocation other = pool->alloc(8 << 20);
    CHECK(pool->stats().purgedBlocks - before <= PurgeRequest::kBlocksPerTurn);
    CHECK(pool->release(other.data) == ReleaseStatus::Ok);
  }
  const PoolStats s = pool->stats();
  CHECK(s.purgedBlocks >= kBlocks && s.purgedBytes >= kBlocks * kBytes);
  for (int i = 0; i < kBlocks; ++i) {
    Allocation a = pool->alloc(kBytes);
    CHECK(a.route == Route::Own && a.zeroed);
    CHECK(allZero(a.data, kBytes));  // the partial pages at either end were zeroed too
    blocks[i] = a.data;
  }
  for (void* p : blocks) CHECK(pool->release(p) == ReleaseStatus::Ok);
}

TEST(a_block_reused_between_epochs_is_never_purged_and_the_idle_ones_are) {
  // An epoch lasts 300 ms, and the loop hands one of eight blocks out every millisecond, for 1.5 s.
  auto pool = decayingPool(300);
  constexpr uint64_t kBytes = 1 << 20;
  void* blocks[8];
  writtenAndFreed(*pool, blocks, 8, kBytes);
  uint64_t zeroedServed = 0;
  for (int ms = 0; ms < 1500; ++ms) {
    Allocation a = pool->alloc(kBytes);
    CHECK(a.route == Route::Own);
    if (a.zeroed) ++zeroedServed;
    static_cast<char*>(a.data)[kBytes - 1] = 2;
    CHECK(pool->release(a.data) == ReleaseStatus::Ok);
    tpt::advanceMs(1);
  }
  const PoolStats s = pool->stats();
  CHECK(s.purgedBlocks == 7);  // the seven below the one in use
  CHECK(zeroedServed == 0);    // the one in use was never given back
}

TEST(the_coarse_clock_never_runs_backwards_nor_ahead_of_the_fine_one_and_lags_it_by_a_tick_at_most) {
  const uint64_t tick = os::coarseResolutionNs();
  CHECK(tick >= 1 && tick <= 100000000ull);
  uint64_t last = 0;
  for (int i = 0; i < 200000; ++i) {
    const uint64_t before = os::monotonicNs();
    const uint64_t coarse = os::coarseMonotonicNs();
    const uint64_t after = os::monotonicNs();
    CHECK(coarse >= last);
    CHECK(coarse <= after);
    CHECK(coarse + 2 * tick >= before);  // a tick, and a tick's worth of slack for a late timer
    last = coarse;
  }
}

TEST(decay_gives_idle_blocks_back_after_its_period_and_not_before) {
  constexpr uint64_t kPeriodMs = 100;
  auto pool = decayingPool(kPeriodMs);
  constexpr uint64_t kBytes = 1 << 20;
  void* blocks[4];
  writtenAndFreed(*pool, blocks, 4, kBytes);
  const auto call = [&] {  // another class's calls give decay its turns
    Allocation other = pool->alloc(8 << 20);
    CHECK(pool->release(other.data) == ReleaseStatus::Ok);
  };
  // The epoch they were freed in ends after a period; they fall due when the next one ends, a period later.
  tpt::advanceMs(kPeriodMs - 1);
  call();
  CHECK(pool->stats().purgedBlocks == 0);
  tpt::advanceMs(1);
  call();
  CHECK(pool->stats().purgedBlocks == 0);  // the epoch they were freed in has just ended: not yet idle for one
  tpt::advanceMs(kPeriodMs - 1);
  call();
  CHECK(pool->stats().purgedBlocks == 0);
  tpt::advanceMs(1);
  call();
  CHECK(pool->stats().purgedBlocks == 4);
}

TEST(decay_on_the_coarse_clock_runs_without_a_clock_given) {
  // The pool's own clock (os::coarseMonotonicNs) where none is given: a period of 0 ends an epoch at every call.
  PoolOptions options;
  options.growth = Growth::BeforeBorrowing;
  options.decayMs = 0;
  std::string error;
  auto pool = Pool::create(defaultPlan(), options, &error);
  CHECK(pool != nullptr);
  void* blocks[4];
  writtenAndFreed(*pool, blocks, 4, 1 << 20);
  for (int call = 0; call < 4 && pool->stats().purgedBlocks < 4; ++call) {
    Allocation other = pool->alloc(8 << 20);
    CHECK(pool->release(other.data) == ReleaseStatus::Ok);
  }
  CHECK(pool->stats().purgedBlocks == 4);
}

TEST(a_pool_without_decay_or_with_a_plan_keeps_its_free_blocks) {
  auto pool = decayingPool(PoolOptions::kNoDecay);
  for (int call = 0; call < 4; ++call) {
    Allocation a = pool->alloc(1 << 20);
    CHECK(pool->release(a.data) == ReleaseStatus::Ok);
  }
  CHECK(pool->stats().purgedBlocks == 0);
  PoolOptions options;
  options.growth = Growth::AfterBorrowing;
  options.decayMs = 0;
  std::string error;
  auto planned = Pool::create(smallPlan(), options, &error);  // what a plan names stays resident
  CHECK(planned != nullptr);
  for (int call = 0; call < 4; ++call) {
    Allocation a = planned->alloc(1 << 20);
    CHECK(planned->release(a.data) == ReleaseStatus::Ok);
  }
  CHECK(planned->stats().purgedBlocks == 0);
}

TEST(growth_of_a_plan_departed_from_is_bounded_by_the_peak_outstanding_bytes) {
  // Ten classes one block each; the run asks 64 blocks of each in turn, ascending, so that no block grown
  // before fits (a smaller class cannot lend): every phase would grow 64 more.
  PlanSpec plan;
  plan.interval = 4096;
  for (uint64_t i = 0; i < 10; ++i) plan.classes.push_back({(1 << 20) + i * (64 << 10), 1});
  PoolOptions options;
  options.growth = Growth::AfterBorrowing;
  options.growReserve = uint64_t{4} << 30;
  std::string error;
  auto pool = Pool::create(plan, options, &error);
  CHECK(pool != nullptr);
  const uint64_t planned = pool->stats().arenaBytes;
  for (const PlanClass& c : plan.classes) {
    std::vector<void*> live;
    for (int i = 0; i < 64; ++i) {
      Allocation a = pool->alloc(c.size);
      CHECK(a.status == AllocStatus::Ok);
      live.push_back(a.data);
    }
    for (void* p : live) CHECK(pool->release(p) == ReleaseStatus::Ok);
  }
  const PoolStats s = pool->stats();
  CHECK(s.grown > 64 && s.osFallbacks > 0);  // grew, then the OS served past the bound
  const uint64_t peak = 64 * ((1 << 20) + 9 * (64 << 10) + 64);
  CHECK(s.arenaBytes - planned <= 2 * peak + (64 << 20) + (2 << 20));
}

TEST(a_block_realloc_moved_gives_its_pages_back_at_once_and_is_handed_out_after_the_resident_ones) {
  auto pool = decayingPool(60000);  // no epoch ends during the test: only releaseMoved purges
  constexpr uint64_t kBytes = 1 << 20;
  Allocation a = pool->alloc(kBytes), b = pool->alloc(kBytes);
  std::memset(a.data, 1, kBytes);
  std::memset(b.data, 2, kBytes);
  CHECK(pool->release(a.data) == ReleaseStatus::Ok);
  CHECK(pool->releaseMoved(b.data) == ReleaseStatus::Ok);
  CHECK(pool->stats().purgedBlocks == 1 && pool->stats().purgedBytes >= kBytes);
  Allocation first = pool->alloc(kBytes), second = pool->alloc(kBytes);
  CHECK(first.data == a.data && !first.zeroed);  // the resident block first, though b was freed after it
  CHECK(second.data == b.data && second.zeroed && allZero(second.data, kBytes));
  CHECK(pool->releaseMoved(first.data) == ReleaseStatus::Ok);
  CHECK(pool->releaseMoved(first.data) == ReleaseStatus::NotLive);
  CHECK(pool->release(second.data) == ReleaseStatus::Ok);
  auto keeping = decayingPool(PoolOptions::kNoDecay);  // without decay, a moved block stays resident
  Allocation c = keeping->alloc(kBytes);
  std::memset(c.data, 3, kBytes);
  CHECK(keeping->releaseMoved(c.data) == ReleaseStatus::Ok);
  CHECK(keeping->stats().purgedBlocks == 0 && !keeping->alloc(kBytes).zeroed);
}

TEST(a_block_the_os_mapped_is_resized_by_the_os_its_bytes_and_serial_kept) {
  const uint64_t mappedBefore = os::mappedBytes();
  auto pool = makePool(smallPlan());
  constexpr uint64_t kMiB = 1 << 20;
  Allocation a = pool->alloc(20 * kMiB);  // above every class: a mapping of its own
  CHECK(a.status == AllocStatus::Ok && a.route == Route::OsOversize);
  fillPattern(a.data, 20 * kMiB, 7);
  void* grown = pool->resizeMapped(a.data, 50 * kMiB);
  CHECK(grown != nullptr && pool->liveSize(grown) == 50 * kMiB);
  CHECK(checkPattern(grown, 20 * kMiB, 7));
  CHECK(allZero(static_cast<char*>(grown) + 20 * kMiB, 30 * kMiB));  // what the mapping gained reads as zero
  CHECK(grown == a.data || pool->liveSize(a.data) == 0);
  fillPattern(grown, 30 * kMiB, 8);  // the bytes the shrunk block keeps
  CHECK(pool->stats().bytesLive == 50 * kMiB && pool->stats().osLiveBytes == 50 * kMiB && pool->stats().allocs == 1);
  void* shrunk = pool->resizeMapped(grown, 30 * kMiB);
  CHECK(shrunk != nullptr && pool->liveSize(shrunk) == 30 * kMiB && checkPattern(shrunk, 30 * kMiB, 8));
  // Refused by the OS: nothing changes, the block stays where it was with its bytes.
  os::failNthCall(os::Call::Map, 1);
  CHECK(pool->resizeMapped(shrunk, 60 * kMiB) == nullptr);
  CHECK(pool->liveSize(shrunk) == 30 * kMiB && checkPattern(shrunk, 30 * kMiB, 8));
  // Only blocks the OS mapped: an arena block, a released one, a foreign pointer are refused.
  Allocation arena = pool->alloc(kMiB);
  CHECK(arena.route == Route::Own && pool->resizeMapped(arena.data, 2 * kMiB) == nullptr);
  int local = 0;
  CHECK(pool->resizeMapped(&local, 2 * kMiB) == nullptr);
  CHECK(pool->release(arena.data) == ReleaseStatus::Ok);
  CHECK(pool->release(shrunk) == ReleaseStatus::Ok);
  CHECK(pool->resizeMapped(shrunk, 2 * kMiB) == nullptr);
  CHECK(pool->stats().bytesLive == 0 && pool->stats().osLiveBlocks == 0);
  pool.reset();
  CHECK(os::mappedBytes() == mappedBefore);
}

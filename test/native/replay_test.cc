// Native tests of the replay loop with the pool and with the C library's allocator.
#include <memory>
#include <vector>

#include "check.h"
#include "replay/replay.h"

using namespace tp;

namespace {

struct Events {
  std::vector<uint8_t> ops;
  std::vector<int32_t> buffers;
  std::vector<double> sizes;
};

// A little training-step shape: activations kept, temporaries freed, an iteration mark, one buffer never freed.
Events steps() {
  Events e;
  auto alloc = [&](double size) {
    e.sizes.push_back(size);
    e.ops.push_back(0);
    e.buffers.push_back(static_cast<int32_t>(e.sizes.size() - 1));
    return static_cast<int32_t>(e.sizes.size() - 1);
  };
  auto release = [&](int32_t b) {
    e.ops.push_back(1);
    e.buffers.push_back(b);
  };
  alloc(4096);  // never freed
  for (int step = 0; step < 3; ++step) {
    if (step > 0) {
      e.ops.push_back(2);
      e.buffers.push_back(-1);
    }
    std::vector<int32_t> kept;
    for (double size : {1 << 20, 3 << 20, 65536, 100}) {
      const int32_t t = alloc(777);
      kept.push_back(alloc(size));
      release(t);
    }
    for (int32_t b : kept) release(b);
  }
  return e;
}

}  // namespace

TEST(replay_runs_against_the_pool_and_libc_and_counts_everything) {
  Events e = steps();
  const ReplayTrace trace{e.ops.data(), e.buffers.data(), e.ops.size(), e.sizes.data(), e.sizes.size()};
  PlanSpec plan;
  plan.interval = 4096;
  plan.classes = {{4096, 4}, {65536, 2}, {1 << 20, 2}, {3 << 20, 2}};
  std::string error;
  auto pool = Pool::create(plan, PoolOptions{}, &error);
  CHECK(pool != nullptr);
  PoolAllocator poolAllocator(pool);
  LibcAllocator libc;
  FaultMeter meter;
  ReplayCursor cursor;
  for (ReplayAllocator* allocator : {static_cast<ReplayAllocator*>(&poolAllocator), static_cast<ReplayAllocator*>(&libc)}) {
    for (Touch touch : {Touch::None, Touch::Pages, Touch::Full, Touch::Verify}) {
      for (bool timed : {false, true}) {
        ReplayOptions options;
        options.touch = touch;
        options.timeOperations = timed;
        options.iterationMarks = true;
        Repetition r;
        CHECK(replayOnce(trace, *allocator, options, meter, cursor, &r));
        CHECK(r.allocs == e.sizes.size() && r.releases == e.sizes.size());  // the never-freed one included
        CHECK(r.ns > 0 && (timed ? r.allocNs > 0 : r.allocNs == 0));
        CHECK(r.corruptions == 0);
      }
    }
  }
  const PoolStats s = pool->stats();
  // A mark between repetitions and at each of the trace's marks: none before the very first iteration.
  CHECK(s.liveBlocks == 0 && s.osFallbacks == 0 && s.iterations == 8 * 3 - 1);
}

namespace {

// Hands out one block to every request: each allocation writes over the live ones.
class OneBlockAllocator final : public ReplayAllocator {
 public:
  void* allocate(uint64_t bytes) override { return bytes <= sizeof(block_) ? block_ : nullptr; }
  void release(void*) override {}

 private:
  alignas(64) unsigned char block_[4 << 20];
};

}  // namespace

TEST(replay_verify_counts_blocks_written_by_another_allocation_and_unmarked_replays_leave_marks_alone) {
  Events e = steps();
  for (double& size : e.sizes) size = size == 100 ? 4106 : size;  // a page's stamp ends 2 bytes into the last one's
  const ReplayTrace trace{e.ops.data(), e.buffers.data(), e.ops.size(), e.sizes.data(), e.sizes.size()};
  FaultMeter meter;
  ReplayOptions options;
  options.touch = Touch::Verify;
  options.unmarked = true;
  {
    auto broken = std::make_unique<OneBlockAllocator>();
    ReplayCursor cursor;
    Repetition r;
    CHECK(replayOnce(trace, *broken, options, meter, cursor, &r));
    // Buffers written over by later allocations show it at their release.
    CHECK(r.corruptions > 0 && r.corruptions <= r.releases);
  }
  std::string error;
  auto pool = Pool::create(defaultPlan(), [] { PoolOptions o; o.growth = Growth::BeforeBorrowing; return o; }(), &error);
  CHECK(pool != nullptr);
  PoolAllocator allocator(pool);
  ReplayCursor cursor;
  for (int rep = 0; rep < 3; ++rep) {
    Repetition r;
    CHECK(replayOnce(trace, allocator, options, meter, cursor, &r));
    CHECK(r.corruptions == 0 && r.allocs == e.sizes.size());
  }
  CHECK(pool->stats().iterations == 0);
}

TEST(replay_reports_an_allocator_that_refuses) {
  Events e = steps();
  const ReplayTrace trace{e.ops.data(), e.buffers.data(), e.ops.size(), e.sizes.data(), e.sizes.size()};
  PlanSpec plan;
  plan.interval = 4096;
  plan.classes = {{4096, 1}};
  std::string error;
  auto pool = Pool::create(plan, PoolOptions{}, &error);
  pool->close();  // a closed pool refuses every request
  PoolAllocator allocator(pool);
  FaultMeter meter;
  ReplayCursor cursor;
  Repetition r;
  CHECK(!replayOnce(trace, allocator, ReplayOptions{}, meter, cursor, &r));
}

TEST(replay_in_steps_keeps_buffers_live_between_steps) {
  Events e = steps();
  const ReplayTrace trace{e.ops.data(), e.buffers.data(), e.ops.size(), e.sizes.data(), e.sizes.size()};
  std::string error;
  auto pool = Pool::create(defaultPlan(), [] { PoolOptions o; o.growth = Growth::BeforeBorrowing; return o; }(), &error);
  CHECK(pool != nullptr);
  PoolAllocator allocator(pool);
  FaultMeter meter;
  ReplayCursor cursor;
  ReplayOptions options;
  uint64_t allocs = 0, releases = 0;
  for (size_t to = 0; to <= e.ops.size(); to += 5) {
    Repetition r;
    CHECK(replayUntil(trace, allocator, options, meter, cursor, std::min(to, e.ops.size()), &r));
    allocs += r.allocs;
    releases += r.releases;
    CHECK(pool->stats().liveBlocks == allocs - releases);
  }
  Repetition r;
  CHECK(replayUntil(trace, allocator, options, meter, cursor, e.ops.size(), &r));
  allocs += r.allocs;
  releases += r.releases;
  CHECK(allocs == e.sizes.size() && pool->stats().liveBlocks == 1);  // the never-freed buffer
  replayRewind(trace, allocator, options, meter, cursor, &r);
  CHECK(r.releases == 1 && cursor.next == 0 && pool->stats().liveBlocks == 0);
}

TEST(ideal_allocator_serves_the_planned_addresses_and_refuses_beyond_its_plan) {
  Events e = steps();
  const ReplayTrace trace{e.ops.data(), e.buffers.data(), e.ops.size(), e.sizes.data(), e.sizes.size()};
  // Nine positions (the first iteration's allocations), 4 MiB apart, each room for the largest buffer.
  OffsetSchedule schedule;
  for (uint64_t k = 0; k < 9; ++k) {
    schedule.sizes.push_back(3 << 20);
    schedule.offsets.push_back(k * (4 << 20));
  }
  schedule.height = 9 * (4 << 20);
  std::string error;
  auto arena = OffsetArena::create(schedule, ArenaOptions{}, &error);
  CHECK(arena != nullptr);
  const char* base = arena->arena().base();
  IdealAllocator ideal(std::move(arena));
  CHECK(ideal.allocate(100) == base);
  CHECK(ideal.allocate(1 << 20) == base + (4 << 20));
  ideal.startIteration();
  FaultMeter meter;
  ReplayCursor cursor;
  ReplayOptions options;
  options.touch = Touch::Full;  // every byte written: out of the arena would be caught by ASan
  options.iterationMarks = true;
  Repetition r;
  CHECK(replayOnce(trace, ideal, options, meter, cursor, &r));
  CHECK(r.allocs == e.sizes.size() && r.releases == e.sizes.size());
  // Without iteration marks the positions run out after nine allocations: refused, not written past.
  options.iterationMarks = false;
  CHECK(!replayOnce(trace, ideal, options, meter, cursor, &r));
  // Larger than planned: refused.
  ideal.startIteration();
  CHECK(ideal.allocate((3 << 20) + 1) == nullptr);
}

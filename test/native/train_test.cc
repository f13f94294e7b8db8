// Native tests of S0 training: placements are checked by an independent conflict check, on random traces.
#include <algorithm>
#include <random>
#include <vector>

#include "check.h"
#include "core/pool.h"
#include "train/refine.h"
#include "train/train.h"

using namespace tp;

namespace {

struct RandomTrace {
  std::vector<double> sizes, starts, ends;
};

// Random lifetimes over `events` time steps: allocations and frees interleaved like a real trace.
RandomTrace randomTrace(uint64_t seed, size_t tensors) {
  std::mt19937_64 rng(seed);
  RandomTrace t;
  double now = 0;
  std::vector<size_t> live;
  for (size_t i = 0; i < tensors; ++i) {
    t.sizes.push_back(static_cast<double>(1 + rng() % (rng() % 4 == 0 ? (4u << 20) : 70000)));
    t.starts.push_back(now++);
    t.ends.push_back(-1);
    live.push_back(i);
    while (!live.empty() && rng() % 3 != 0) {
      const size_t k = rng() % live.size();
      t.ends[live[k]] = now++;
      live[k] = live.back();
      live.pop_back();
    }
  }
  for (size_t i : live) t.ends[i] = now;  // never freed: live to the end
  return t;
}

// Every block's tensors are pairwise disjoint in time and fit its class; borrows counted as training says.
void checkPlacement(const RandomTrace& t, const TrainResult& r, uint64_t interval) {
  const size_t n = t.sizes.size();
  CHECK(r.plan.schedule.size() == n && r.blockOf.size() == n);
  uint64_t borrows = 0;
  std::vector<std::vector<size_t>> byBlock;
  for (size_t i = 0; i < n; ++i) {
    const ScheduleEntry& e = r.plan.schedule[i];
    CHECK(e.classIndex < r.plan.classes.size());
    const uint64_t classSize = r.plan.classes[e.classIndex].size;
    const uint64_t own = (static_cast<uint64_t>(t.sizes[i]) + interval - 1) / interval * interval;
    CHECK(classSize >= own);
    if (classSize != own) ++borrows;
    if (r.blockOf[i] >= byBlock.size()) byBlock.resize(r.blockOf[i] + 1);
    byBlock[r.blockOf[i]].push_back(i);
  }
  CHECK(borrows == r.borrows);
  uint64_t blocks = 0;
  for (const PlanClass& c : r.plan.classes) blocks += c.blocks;
  CHECK(byBlock.size() == blocks);
  for (std::vector<size_t>& members : byBlock) {
    std::sort(members.begin(), members.end(), [&](size_t a, size_t b) { return t.starts[a] < t.starts[b]; });
    for (size_t k = 1; k < members.size(); ++k) CHECK(t.ends[members[k - 1]] <= t.starts[members[k]]);
    for (size_t k = 1; k < members.size(); ++k) {
      CHECK(r.plan.schedule[members[k]].classIndex == r.plan.schedule[members[0]].classIndex);
    }
  }
}

}  // namespace

TEST(train_places_tensors_without_conflicts_in_both_orders) {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    const RandomTrace t = randomTrace(seed, 3000);
    for (TrainOrder order : {TrainOrder::AllocTime, TrainOrder::SizeDescending}) {
      for (uint64_t interval : {1ull, 512ull, 4096ull, 65536ull}) {
        TrainInput in{t.sizes.data(), t.starts.data(), t.ends.data(), t.sizes.size(), interval, order};
        checkPlacement(t, trainSizeClasses(in), interval);
      }
    }
  }
}

uint64_t classBytes(const std::vector<PlanClass>& classes) {
  uint64_t total = 0;
  for (const PlanClass& c : classes) total += c.size * c.blocks;
  return total;
}

TEST(refinement_keeps_placements_valid_and_never_grows_the_plan) {
  uint64_t literal = 0, refined = 0;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    const RandomTrace t = randomTrace(seed, 3000);
    for (TrainOrder order : {TrainOrder::AllocTime, TrainOrder::SizeDescending}) {
      for (uint64_t interval : {1ull, 512ull, 4096ull, 65536ull}) {
        TrainInput in{t.sizes.data(), t.starts.data(), t.ends.data(), t.sizes.size(), interval, order, true};
        const TrainResult r = trainSizeClasses(in);
        CHECK(r.refined);
        checkPlacement(t, r, interval);  // blocks re-dealt: still no two lifetimes of a block overlap
        CHECK(classBytes(r.plan.classes) <= classBytes(r.literal));
        in.refine = false;
        CHECK(classBytes(trainSizeClasses(in).plan.classes) == classBytes(r.literal));
        literal += classBytes(r.literal);
        refined += classBytes(r.plan.classes);
      }
    }
  }
  CHECK(refined < literal);  // and it does lower something on these traces
  // Above its memory limit it leaves the plan as S0 gave it.
  const RandomTrace t = randomTrace(3, 500);
  TrainInput in{t.sizes.data(), t.starts.data(), t.ends.data(), t.sizes.size(), 4096, TrainOrder::AllocTime};
  TrainResult r = trainSizeClasses(in);
  const TrainResult before = r;
  RefineLimits tiny;
  tiny.maxTreeBytes = 1;
  CHECK(!refineClasses(in, &r, tiny));
  CHECK(r.blockOf == before.blockOf && classBytes(r.plan.classes) == classBytes(before.plan.classes));
}

TEST(train_in_parallel_matches_one_by_one) {
  const RandomTrace t = randomTrace(42, 5000);
  const std::vector<uint64_t> intervals = {512, 1024, 4096, 65536, 1 << 20};
  TrainInput in{t.sizes.data(), t.starts.data(), t.ends.data(), t.sizes.size(), 0, TrainOrder::SizeDescending};
  std::vector<TrainResult> results;
  std::vector<uint64_t> elapsed;
  trainEachInterval(in, intervals, 4, &results, &elapsed);
  for (size_t i = 0; i < intervals.size(); ++i) {
    in.interval = intervals[i];
    const TrainResult one = trainSizeClasses(in);
    CHECK(one.borrows == results[i].borrows && one.blockOf == results[i].blockOf);
    CHECK(one.plan.classes.size() == results[i].plan.classes.size());
  }
}

TEST(a_pool_following_the_schedule_realises_training_exactly) {
  const RandomTrace t = randomTrace(9, 2000);
  for (bool refine : {false, true}) {
    TrainInput in{t.sizes.data(), t.starts.data(), t.ends.data(), t.sizes.size(), 4096, TrainOrder::SizeDescending, refine};
    const TrainResult r = trainSizeClasses(in);
    PoolOptions options;
    options.arena.prefault = false;
    std::string error;
    auto pool = Pool::create(r.plan, options, &error);
    CHECK(pool != nullptr);
    // Events in time order: starts and ends are distinct time steps.
    std::vector<std::pair<double, int64_t>> events;  // (time, tensor + 1 for alloc, -(tensor + 1) for free)
    for (size_t i = 0; i < t.sizes.size(); ++i) {
      events.push_back({t.starts[i], static_cast<int64_t>(i) + 1});
      events.push_back({t.ends[i] + 0.5, -static_cast<int64_t>(i) - 1});  // +0.5: never-freed ones sort last
    }
    std::sort(events.begin(), events.end());
    std::vector<void*> where(t.sizes.size(), nullptr);
    for (auto [time, e] : events) {
      if (e > 0) {
        Allocation a = pool->alloc(static_cast<uint64_t>(t.sizes[static_cast<size_t>(e - 1)]));
        CHECK(a.status == AllocStatus::Ok && a.route != Route::OsFallback);
        where[static_cast<size_t>(e - 1)] = a.data;
      } else {
        CHECK(pool->release(where[static_cast<size_t>(-e - 1)]) == ReleaseStatus::Ok);
      }
    }
    const PoolStats s = pool->stats();
    CHECK(s.scheduleHits == t.sizes.size() && s.scheduleMisses == 0);
    CHECK(s.borrows == r.borrows && s.osFallbacks == 0);
  }
}

TEST(a_schedule_that_does_not_fit_its_class_is_refused) {
  PlanSpec plan;
  plan.interval = 4096;
  plan.classes = {{4096, 1}};
  plan.schedule = {{8192, 0}};
  std::string error;
  CHECK(Pool::create(plan, PoolOptions{}, &error) == nullptr);
  CHECK(error.find("schedule entry 0") != std::string::npos);
  plan.schedule = {{100, 3}};
  CHECK(Pool::create(plan, PoolOptions{}, &error) == nullptr);
}

TEST(refinement_keeps_a_class_for_tensors_with_empty_lifetimes) {
  // Tensor 0 lives [2, 2) (allocated and freed at once); tensors 1 and 2 take a larger class meanwhile.
  const std::vector<double> sizes = {4096, 65536, 65536}, starts = {2, 0, 1}, ends = {2, 5, 6};
  for (TrainOrder order : {TrainOrder::AllocTime, TrainOrder::SizeDescending}) {
    TrainInput in{sizes.data(), starts.data(), ends.data(), sizes.size(), 4096, order, true};
    const TrainResult r = trainSizeClasses(in);
    CHECK(r.refined);
    for (const ScheduleEntry& e : r.plan.schedule) CHECK(e.classIndex < r.plan.classes.size() && r.plan.classes[e.classIndex].blocks > 0);
    CHECK(r.plan.classes[r.plan.schedule[0].classIndex].size >= 4096);
  }
}

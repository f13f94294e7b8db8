// Native tests of Pool::releaseSoon: a release that finds the pool's lock held is queued rather than waited
// for, and the next holder of the lock applies it before anything else it does.
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "check.h"
#include "core/pool.h"
#include "pool_helpers.h"

using tp::AllocStatus;
using tp::Growth;
using tp::Pool;
using tp::ReleaseStatus;

namespace {

std::atomic<int> failedReleases{0};
std::atomic<ReleaseStatus> lastFailure{ReleaseStatus::Ok};
void countFailure(ReleaseStatus status) {
  lastFailure = status;
  failedReleases++;
}

std::shared_ptr<Pool> spansPool() {
  tp::PoolOptions options;
  options.growth = Growth::Spans;
  options.decayMs = tp::PoolOptions::kNoDecay;
  options.queuedReleaseFailed = countFailure;
  std::string error;
  auto pool = Pool::create(tp::defaultPlan(), options, &error);
  CHECK(pool != nullptr);
  return pool;
}

// Runs `f` on another thread while this one holds the pool's lock (lockForFork: the only way in from
// outside) for up to `waitMs`, and returns whether `f` finished while the lock was held: a release that waits
// for the lock never does, one queued does as soon as its thread runs.
template <typename F>
bool finishesWhileLocked(Pool& pool, int waitMs, F f) {
  std::atomic<bool> done{false};
  pool.lockForFork();
  std::thread other([&] {
    f();
    done = true;
  });
  // A release that waited for the lock would never finish here; one queued finishes at once.
  for (int i = 0; i < waitMs && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const bool finished = done;
  pool.unlockAfterFork(false);
  other.join();
  return finished;
}

constexpr int kLong = 60000;  // ms: a queued release finishes long before, however loaded the machine
constexpr int kShort = 200;   // ms: long enough for a release that would queue to have done so, usually

}  // namespace

TEST(a_release_that_finds_the_lock_held_is_queued_and_the_next_holder_applies_it_before_its_counts) {
  auto pool = spansPool();
  const tp::Allocation a = pool->alloc(100 << 10);
  CHECK(a.status == AllocStatus::Ok);
  CHECK(finishesWhileLocked(*pool, kLong, [&] { CHECK(pool->releaseSoon(a.data) == ReleaseStatus::Ok); }));
  // Applied by whoever took the lock next (the releasing thread itself, once it was let go) or by stats().
  const tp::PoolStats s = pool->stats();
  CHECK(s.releases == 1);
  CHECK(s.liveBlocks == 0);
  CHECK(s.bytesLive == 0);
  CHECK(pool->liveSize(a.data) == 0);
  // And its memory serves again: a request of the same size takes the same span.
  const tp::Allocation b = pool->alloc(100 << 10);
  CHECK(b.status == AllocStatus::Ok && b.data == a.data);
  CHECK(pool->releaseSoon(b.data) == ReleaseStatus::Ok);
  CHECK(pool->stats().liveBlocks == 0);
}

TEST(a_queued_release_of_no_live_block_is_reported_by_the_thread_that_applies_it) {
  auto pool = spansPool();
  const tp::Allocation a = pool->alloc(100 << 10);
  CHECK(a.status == AllocStatus::Ok);
  CHECK(pool->releaseSoon(a.data) == ReleaseStatus::Ok);  // the lock is free: applied now
  failedReleases = 0;
  // A second release (a double free) while the lock is held: queued, then found NotLive once applied.
  CHECK(finishesWhileLocked(*pool, kLong, [&] { CHECK(pool->releaseSoon(a.data) == ReleaseStatus::Ok); }));
  pool->stats();
  CHECK(failedReleases == 1);
  CHECK(lastFailure == ReleaseStatus::NotLive);
  CHECK(pool->stats().releases == 1);
  // Applied at once, the same release says so itself.
  CHECK(pool->releaseSoon(a.data) == ReleaseStatus::NotLive);
  CHECK(failedReleases == 1);
}

TEST(while_recording_a_release_waits_for_the_lock_so_that_the_trace_keeps_its_order) {
  auto pool = spansPool();
  pool->startRecording(1000);
  const tp::Allocation a = pool->alloc(100 << 10);
  CHECK(a.status == AllocStatus::Ok);
  CHECK(!finishesWhileLocked(*pool, kShort, [&] { CHECK(pool->releaseSoon(a.data) == ReleaseStatus::Ok); }));
  CHECK(pool->stats().releases == 1);
  pool->stopRecording();
  const tp::Allocation b = pool->alloc(100 << 10);
  CHECK(finishesWhileLocked(*pool, kLong, [&] { CHECK(pool->releaseSoon(b.data) == ReleaseStatus::Ok); }));
  CHECK(pool->stats().releases == 2);
}

TEST(releases_queued_from_many_threads_are_each_applied_once) {
  auto pool = spansPool();
  constexpr int kThreads = 8, kEach = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&pool, t] {
      for (int i = 0; i < kEach; ++i) {
        const tp::Allocation a = pool->alloc((64 << 10) + static_cast<uint64_t>((t * kEach + i) % 97) * 4096);
        CHECK(a.status == AllocStatus::Ok);
        static_cast<char*>(a.data)[0] = 1;
        CHECK(pool->releaseSoon(a.data) == ReleaseStatus::Ok);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const tp::PoolStats s = pool->stats();
  CHECK(s.allocs == uint64_t{kThreads} * kEach);
  CHECK(s.releases == s.allocs);
  CHECK(s.liveBlocks == 0 && s.bytesLive == 0);
}

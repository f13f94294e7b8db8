// What the pool does when the operating system says no (os::failNthCall): at arena creation, growth, OS
// fallback and switch preparation, each refusal gives an error or a documented fallback, the pool keeps
// serving what it holds, and nothing leaks (the pool's reserved / committed bytes, the OS layer's mapped bytes).
#include <sys/resource.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "check.h"
#include "os/os.h"
#include "core/pool.h"

using namespace tp;

namespace {

// Address space the OS layer has mapped and not unmapped (under ASan, /proc/self/maps also moves with the
// sanitizer's own allocations, so the layer's count is what is compared).
size_t mappingCount() { return os::mappedBytes(); }

PlanSpec plan(uint64_t size, uint64_t blocks) {
  PlanSpec p;
  p.interval = 4096;
  p.classes = {{size, blocks}};
  return p;
}

// Every block of `pool` it can take is written and given back: the pool still serves.
void stillServes(Pool& pool, uint64_t bytes) {
  Allocation a = pool.alloc(bytes);
  CHECK(a.status == AllocStatus::Ok && a.data != nullptr);
  std::memset(a.data, 0x5a, bytes);
  CHECK(pool.release(a.data) == ReleaseStatus::Ok);
}

// A pool of one class holding one live block, `*held`, filled with `fill`.
std::shared_ptr<Pool> poolHolding(uint64_t size, uint64_t blocks, Allocation* held, int fill) {
  std::string error;
  auto pool = Pool::create(plan(size, blocks), PoolOptions{}, &error);
  CHECK(pool != nullptr);
  *held = pool->alloc(size);
  CHECK(held->status == AllocStatus::Ok);
  std::memset(held->data, fill, size);
  return pool;
}

// The held block kept its contents through what was refused, goes back, and the pool serves on.
void giveBackAndServe(Pool& pool, const Allocation& held, uint64_t size, int fill, uint64_t next) {
  const unsigned char* bytes = static_cast<const unsigned char*>(held.data);
  CHECK(bytes[0] == fill && bytes[size - 1] == fill);
  CHECK(pool.release(held.data) == ReleaseStatus::Ok);
  stillServes(pool, next);
}

}  // namespace

TEST(a_refused_arena_mapping_fails_creation_with_a_message_and_maps_nothing) {
  const size_t before = mappingCount();
  for (os::Call call : {os::Call::Map, os::Call::Populate}) {
    os::failNthCall(call, 1);
    std::string error;
    auto pool = Pool::create(plan(1 << 20, 8), PoolOptions{}, &error);
    os::failNthCall(call, 0);
    CHECK(pool == nullptr);
    CHECK(!error.empty());
  }
  CHECK(mappingCount() == before);
}

TEST(a_refused_mlock_names_the_limit_and_maps_nothing) {
  const size_t before = mappingCount();
  PoolOptions options;
  options.arena.lock = true;
  os::failNthCall(os::Call::Lock, 1);
  std::string error;
  auto pool = Pool::create(plan(64 << 10, 4), options, &error);
  os::failNthCall(os::Call::Lock, 0);
  CHECK(pool == nullptr);
  CHECK(error.find("RLIMIT_MEMLOCK") != std::string::npos);
  CHECK(mappingCount() == before);
}

TEST(a_grown_block_is_carved_without_faulting_its_pages_in) {
  PoolOptions options;
  options.growth = Growth::BeforeBorrowing;
  options.growReserve = 64 << 20;
  std::string error;
  auto pool = Pool::create(defaultPlan(), options, &error);
  CHECK(pool != nullptr);
  os::failNthCall(os::Call::Populate, 1);  // a carve that pre-faulted would be refused and go to the OS
  Allocation grown = pool->alloc(1 << 20);
  os::failNthCall(os::Call::Populate, 0);
  CHECK(grown.status == AllocStatus::Ok && grown.route == Route::Grown);
  CHECK(grown.zeroed);  // fresh memory: a calloc need not write it
  CHECK(pool->stats().committedBytes == 0);
  for (int i = 0; i < (1 << 20); i += 4096) CHECK(static_cast<char*>(grown.data)[i] == 0);
  std::memset(grown.data, 2, 1 << 20);
  CHECK(pool->release(grown.data) == ReleaseStatus::Ok);
  Allocation again = pool->alloc(1 << 20);  // the same block, written by its last owner
  CHECK(again.route == Route::Own && !again.zeroed);
  CHECK(pool->release(again.data) == ReleaseStatus::Ok);
  stillServes(*pool, 1 << 20);
}

TEST(a_refused_os_fallback_is_out_of_memory_and_changes_nothing_else) {
  Allocation held;
  auto pool = poolHolding(1 << 20, 1, &held, 3);
  const size_t maps = mappingCount();
  const PoolStats before = pool->stats();
  for (os::Call call : {os::Call::Map, os::Call::Heap}) {
    os::failNthCall(call, 1);
    Allocation refused = pool->alloc(call == os::Call::Map ? (4 << 20) : 4096);  // mmap'd / from the C heap
    os::failNthCall(call, 0);
    CHECK(refused.status == AllocStatus::OutOfMemory && refused.data == nullptr);
  }
  const PoolStats after = pool->stats();
  CHECK(after.liveBlocks == before.liveBlocks && after.osLiveBlocks == 0 && after.bytesLive == before.bytesLive);
  CHECK(mappingCount() == maps);
  giveBackAndServe(*pool, held, 1 << 20, 3, 1 << 20);
}

TEST(a_refused_switch_preparation_leaves_the_serving_plan_and_maps_nothing) {
  Allocation held;
  auto pool = poolHolding(1 << 20, 2, &held, 4);
  const PoolStats before = pool->stats();
  const size_t maps = mappingCount();
  for (os::Call call : {os::Call::Map}) {
    std::string why;
    os::failNthCall(call, 1);
    CHECK(pool->prepareSwitch(plan(2 << 20, 4), &why) == 0);
    os::failNthCall(call, 0);
    CHECK(!why.empty());
    why.clear();
    os::failNthCall(call, 1);
    const bool switched = pool->switchPlan(plan(2 << 20, 4), &why);
    os::failNthCall(call, 0);
    CHECK(!switched && !why.empty());
  }
  pool->markIteration();  // nothing prepared: nothing installed
  const PoolStats after = pool->stats();
  CHECK(after.reservedBytes == before.reservedBytes && after.committedBytes == before.committedBytes);
  CHECK(mappingCount() == maps);
  CHECK(pool->classStats().size() == 1 && pool->classStats()[0].size == (1 << 20));
  giveBackAndServe(*pool, held, 1 << 20, 4, 1 << 20);
}

// A switched arena is pre-faulted after the switch (once the retired arena gave its free pages back): where
// the kernel refuses, the plan serves all the same and its pages fault in where they are first touched.
TEST(a_refused_populate_after_a_switch_leaves_the_plan_serving) {
  Allocation held;
  auto pool = poolHolding(1 << 20, 2, &held, 5);
  const PoolStats before = pool->stats();
  std::string why;
  os::failNthCall(os::Call::Populate, 1);
  const bool switched = pool->switchPlan(plan(2 << 20, 4), &why);
  os::failNthCall(os::Call::Populate, 0);
  CHECK(switched && why.empty());
  const PoolStats after = pool->stats();
  CHECK(after.switches == 1 && after.committedBytes == before.committedBytes);  // nothing of the new arena
  CHECK(pool->classStats().size() == 1 && pool->classStats()[0].size == (2 << 20));
  giveBackAndServe(*pool, held, 1 << 20, 5, 2 << 20);
}

TEST(a_refused_discard_keeps_the_retired_arena_valid) {
  Allocation held;
  auto pool = poolHolding(1 << 20, 2, &held, 7);
  std::string error;
  os::failNthCall(os::Call::Discard, 1);  // the retired arena's free block keeps its pages
  CHECK(pool->switchPlan(plan(2 << 20, 1), &error));
  os::failNthCall(os::Call::Discard, 0);
  giveBackAndServe(*pool, held, 1 << 20, 7, 2 << 20);  // its arena drains and is unmapped
}

// A real limit rather than an injected refusal. (Not under AddressSanitizer: its shadow memory needs far more
// address space than any RLIMIT_AS a test could set.)
#if !defined(__SANITIZE_ADDRESS__)
TEST(an_address_space_limit_refuses_an_arena_clearly_and_the_pool_before_it_keeps_serving) {
  std::string error;
  auto pool = Pool::create(plan(1 << 20, 2), PoolOptions{}, &error);
  CHECK(pool != nullptr);
  struct rlimit saved;
  CHECK(getrlimit(RLIMIT_AS, &saved) == 0);
  struct rlimit limited = saved;
  limited.rlim_cur = 64ull << 30;  // far below what a 256 GiB arena needs, far above what the process uses
  CHECK(setrlimit(RLIMIT_AS, &limited) == 0);
  PoolOptions reserveOnly;
  reserveOnly.arena.prefault = false;
  auto big = Pool::create(plan(1ull << 30, 256), reserveOnly, &error);
  CHECK(setrlimit(RLIMIT_AS, &saved) == 0);
  CHECK(big == nullptr);
  CHECK(error.find("could not reserve") != std::string::npos && error.find(std::strerror(ENOMEM)) != std::string::npos);
  stillServes(*pool, 1 << 20);
}
#endif

// A locked pool hands out locked memory only: an OS block it cannot lock is refused with the reason, and a
// growth whose lock is refused goes to an OS block that is locked.
TEST(a_locked_pool_never_hands_out_unlocked_memory) {
  PoolOptions options;
  options.arena.lock = true;
  std::string error;
  auto pool = Pool::create(plan(64 << 10, 1), options, &error);
  CHECK(pool != nullptr);
  const size_t before = mappingCount();
  os::failNthCall(os::Call::Lock, 1);
  Allocation refused = pool->alloc(4 << 20);  // larger than every class: an OS block, whose mlock is refused
  os::failNthCall(os::Call::Lock, 0);
  CHECK(refused.status == AllocStatus::OutOfMemory);
  CHECK(pool->lastRefusal().find("RLIMIT_MEMLOCK") != std::string::npos);
  CHECK(mappingCount() == before);
  Allocation held = pool->alloc(64 << 10);  // the plan's one block
  Allocation small = pool->alloc(1000);      // an OS block below the map threshold: mapped and locked, not the C heap
  CHECK(held.route == Route::Own && small.status == AllocStatus::Ok && small.route == Route::OsFallback);
  CHECK(mappingCount() > before);
  CHECK(pool->release(small.data) == ReleaseStatus::Ok && pool->release(held.data) == ReleaseStatus::Ok);
  CHECK(mappingCount() == before);

  options.growth = Growth::BeforeBorrowing;
  options.growReserve = 64 << 20;
  auto growing = Pool::create(defaultPlan(), options, &error);
  CHECK(growing != nullptr);
  os::failNthCall(os::Call::Lock, 1);  // the growth's lock
  Allocation fallback = growing->alloc(1 << 20);
  os::failNthCall(os::Call::Lock, 0);
  CHECK(fallback.status == AllocStatus::Ok && fallback.route == Route::OsFallback);
  CHECK(growing->release(fallback.data) == ReleaseStatus::Ok);
}

#include "process_pool.h"

#include <errno.h>
#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "os/os.h"
#include "core/pool.h"
#include "always_run.h"
#include "c_heap.h"
#include "next_allocator.h"
#include "decay_thread.h"
#include "signal_flush.h"
#include "stats_page.h"
#include "this_process.h"

namespace tp::preload {

constinit thread_local unsigned detail::insideDepth = 0;
std::atomic<size_t> detail::routeFrom{SIZE_MAX};
std::atomic<uint8_t> detail::mallocExtras{0};
std::atomic<size_t> detail::fastBelow{SIZE_MAX};
std::atomic<void* (*)(size_t)> detail::mallocBelow{mallocThroughNext};
std::atomic<void (*)(void*)> detail::freeEntry{freeWithChecks};
std::atomic<bool> detail::anyShifted{false};

namespace {
using detail::insideDepth;

std::atomic<bool> ready{false};
std::shared_ptr<Pool>* processPool = nullptr;  // never destroyed: memory may be freed until the very end
std::atomic<Pool*> madePoolPointer{nullptr};

PoolRecipe* recipe = nullptr;  // what the pool is made of until it is; nullptr once made, or once making it failed
std::mutex making;         // held while the pool is made, and across fork(): no child inherits it half made

Pool* made() { return madePoolPointer.load(std::memory_order_acquire); }
Pool& pool() { return *made(); }  // Pre: the pool was made (its blocks exist, or JS was handed the table)

// Whether decay takes turns from the C library's mallocs: the pool decays, and holds memory it could give back.
std::atomic<bool> decaying{false};

// fastBelow and mallocBelow from mallocExtras, again until they are what it says after the stores: of two
// threads that change it at once, the one that stores last checks last.
TP_ALWAYS_RUN void updateFastBelow() {
  uint8_t extras;
  do {
    extras = detail::mallocExtras.load(std::memory_order_seq_cst);
    const bool ticks = extras & detail::kPoolTicks;
    detail::mallocBelow.store(ticks ? mallocCounted : next.malloc.load(std::memory_order_acquire), std::memory_order_seq_cst);
    const bool limited = extras & detail::kAddressLimited;
    detail::fastBelow.store(limited ? 0 : detail::routeFrom.load(std::memory_order_relaxed), std::memory_order_seq_cst);
  } while (detail::mallocExtras.load(std::memory_order_seq_cst) != extras);
}

TP_ALWAYS_RUN void setMallocExtra(detail::MallocExtra extra, bool on) {
  if (on) detail::mallocExtras.fetch_or(extra, std::memory_order_seq_cst);
  else detail::mallocExtras.fetch_and(static_cast<uint8_t>(~extra), std::memory_order_seq_cst);
  updateFastBelow();
}


PlanSpec defaultClasses(uint64_t spanReserve) {
  PlanSpec plan = defaultPlan();
  plan.spanReserve = spanReserve;
  return plan;
}

Pool* makeOrServe() {
  if (Pool* p = made()) return p;
  InternalScope inside;
  std::lock_guard lock(making);
  if (Pool* p = made()) return p;
  if (!recipe) return nullptr;
  std::string error;
  // The request the pool cannot serve goes to the C library, which sets errno only where it fails too.
  const int saved = errno;
  // A limit the program set since start-up (setrlimit(RLIMIT_AS)) bounds the reservation as one set before.
  if (!recipe->reserveGiven) recipe->options.growReserve = std::min(recipe->options.growReserve, defaultReserve());
  // The address map free() reads is mapped with the pool, not at load: in a process whose pool is never
  // made, free() finds no map and goes straight to the C library.
  std::shared_ptr<Pool> fresh;
  recipe->options.counters = makeStatsPage(recipe->options.decayMs);  // stats_page.h
  if (!os::trackMappings()) error = std::string("cannot map the address map: ") + strerror(errno);
  else fresh = Pool::create(recipe->plan ? *recipe->plan : defaultClasses(recipe->spanReserve), recipe->options, &error);
  if (fresh && recipe->record) fresh->startRecording(recipe->recordEvents);
  const bool decays = recipe->options.decayMs != PoolOptions::kNoDecay;
  const bool recording = recipe->record;
  delete recipe->plan;
  delete recipe;
  recipe = nullptr;
  if (!fresh) {
    dropStatsPage();  // stats_page.h
    detail::routeFrom.store(SIZE_MAX, std::memory_order_release);
    updateFastBelow();
    say(error + "; the pool is off, the C library serves every allocation");
    errno = saved;
    return nullptr;
  }
  errno = saved;
  freeNeedsChecks();  // before the first block is handed out
  processPool = new std::shared_ptr<Pool>(std::move(fresh));
  madePoolPointer.store(processPool->get(), std::memory_order_release);
  decaying.store(decays, std::memory_order_relaxed);
  setMallocExtra(detail::kPoolTicks, decays);
  // Only now, with something to record: a process that records nothing keeps SIGINT's and SIGTERM's
  // dispositions as it found them.
  if (recording) flushOnTerminatingSignals(writeRecordingOnce);
  publishStats(*made(), Publish::Now);  // stats_page.h
  return made();
}

}  // namespace

TP_ALWAYS_RUN InternalScope::InternalScope() { ++insideDepth; }
TP_ALWAYS_RUN InternalScope::~InternalScope() { --insideDepth; }

TP_ALWAYS_RUN bool insidePool() { return insideDepth != 0; }
TP_ALWAYS_RUN void enterPool() { ++insideDepth; }
TP_ALWAYS_RUN void leavePool() { --insideDepth; }

TP_ALWAYS_RUN void lockPoolForFork() {
  making.lock();
  if (Pool* p = made()) p->lockForFork();
}

TP_ALWAYS_RUN void unlockPoolAfterFork(bool child) {
  if (Pool* p = made()) p->unlockAfterFork(child);
  making.unlock();
}

void* poolAlloc(size_t bytes, bool* zero) {
  Pool* serving = servingPool();
  if (!serving) return nullptr;
  InternalScope inside;
  // errno is the C library's to set: a pool that cannot serve leaves the request to it, which then
  // succeeds (errno untouched, as on every success) or fails and says why.
  const int saved = errno;
  Allocation a;
  try {
    a = serving->alloc(bytes);
  } catch (...) {  // std::bad_alloc from the pool's own bookkeeping: a failed allocation, not a crash
    a.status = AllocStatus::OutOfMemory;
  }
  errno = saved;
  if (a.status != AllocStatus::Ok) return nullptr;
  cHeapBesidePool(bytes, a.route == Route::Grown || a.route == Route::OsFallback || a.route == Route::OsOversize);
  if (a.route != Route::OsFallback && a.route != Route::OsOversize) decayThreadAfterAlloc();  // an arena block: watched
  // Fresh mappings, and arena blocks never written since carved or given back to the OS, read as zero.
  if (zero) *zero = a.zeroed;
  return a.data;
}

namespace {
// What glibc prints, then abort(): a host that frees what it does not own or frees twice is stopped as
// glibc would stop it, with glibc's words (its message for a block of the sizes the pool serves).
[[noreturn]] void invalidFree(ReleaseStatus status) {
  static const char kDouble[] = "double free or corruption (!prev)\n";
  static const char kInvalid[] = "free(): invalid pointer\n";
  const bool twice = status == ReleaseStatus::NotLive;
  ssize_t ignored = write(STDERR_FILENO, twice ? kDouble : kInvalid, twice ? sizeof kDouble - 1 : sizeof kInvalid - 1);
  (void)ignored;
  abort();
}


void releaseToPool(void* p, bool moved) {
  InternalScope inside;
  const int saved = errno;  // free() leaves errno as it was (glibc since 2.33)
  ReleaseStatus status;
  try {
    status = moved ? pool().releaseMoved(p) : pool().releaseSoon(p);
  } catch (...) {
    status = ReleaseStatus::NotOwned;
  }
  if (status != ReleaseStatus::Ok) invalidFree(status);
  decayThreadAfterRelease();
  // Something may be idle now: decay's turns from the C library's mallocs start again.
  if (decaying.load(std::memory_order_relaxed) && !(detail::mallocExtras.load(std::memory_order_relaxed) & detail::kPoolTicks)) {
    cHeapResync();
    setMallocExtra(detail::kPoolTicks, true);
  }
  errno = saved;
}
}  // namespace

void poolFree(void* p) { releaseToPool(p, false); }
void poolFreeMoved(void* p) { releaseToPool(p, true); }

size_t poolUsableSize(const void* p) {
  InternalScope inside;
  return pool().liveSize(p);
}

bool poolResizeInPlace(void* p, size_t bytes) {
  InternalScope inside;
  const int saved = errno;
  bool resized = false;
  try {
    resized = pool().resizeInPlace(p, bytes);
  } catch (...) {
  }
  errno = saved;
  return resized;
}

void fitPoolToAddressSpace() {
  const uint64_t limit = os::addressSpaceLimit();
  const bool limited = limit != UINT64_MAX;
  setMallocExtra(detail::kAddressLimited, limited);
  if (!limited || !made()) return;  // (a pool made later reserves within the limit: servingPool)
  InternalScope inside;
  const int saved = errno;
  pool().fitAddressSpace(limit, os::addressSpaceUsed());
  errno = saved;
}

bool poolGaveBackSpare() {
  if (!made() || insidePool()) return false;
  InternalScope inside;
  const int saved = errno;
  const bool gave = addressSpaceLimited() && pool().giveBackAddressSpace() > 0;
  errno = saved;
  return gave;
}

void* poolResizeMapped(void* p, size_t bytes) {
  InternalScope inside;
  const int saved = errno;
  void* moved = pool().resizeMapped(p, bytes);  // nothing in it throws: its set is re-keyed, not grown
  errno = saved;
  return moved;
}

void* poolAllocMoved(size_t bytes) {
  InternalScope inside;
  const int saved = errno;
  void* fresh = nullptr;
  try {
    fresh = pool().allocMoved(bytes);
  } catch (...) {  // std::bad_alloc from the pool's set of OS blocks: declined, as poolAlloc's failures
  }
  errno = saved;
  // A mapping of its own: memory fresh from the OS, as poolAlloc's grown blocks (glibc would have grown the
  // buffer into what its small blocks freed).
  if (fresh) cHeapBesidePool(bytes, true);
  return fresh;
}

DecayWatch poolDecayTick() {
  Pool* serving = made();
  if (!serving) return DecayWatch::Nothing;
  if (insidePool()) return DecayWatch::Busy;
  InternalScope inside;
  const int saved = errno;
  const DecayWatch found = serving->decayTick();
  publishStats(*serving, Publish::IfDue);  // stats_page.h
  errno = saved;
  return found;
}

// `ask` of the serving pool, as the pool's own code (InternalScope: what it allocates comes from the next
// allocator), errno kept; 0 before the pool is made and on a thread already inside it (it may hold the lock).
template <typename Ask>
uint64_t askServing(Ask ask) {
  Pool* serving = made();
  if (!serving || insidePool()) return 0;
  InternalScope inside;
  const int saved = errno;
  const uint64_t answer = ask(*serving);
  errno = saved;
  return answer;
}

void poolQuietFor(uint64_t ns) {
  askServing([ns](Pool& serving) { return serving.quietFor(ns); });
  if (made() && !insidePool()) publishStats(pool(), Publish::IfChanged);  // stats_page.h
}

uint64_t poolQuietPeriodNs(uint64_t worthBytes) {
  return askServing([worthBytes](Pool& serving) { return serving.quietPeriodNs(worthBytes); });
}

bool poolPurgeSpansFor(uint64_t bytes) {
  Pool* serving = made();
  if (!serving) return true;
  if (insidePool()) return false;
  InternalScope inside;
  const int saved = errno;
  const bool ran = serving->tryPurgeSpansFor(bytes);
  errno = saved;
  return ran;
}

PoolHeld poolHeld() {
  PoolHeld held;
  if (!made() || insidePool()) return held;
  InternalScope inside;
  const int saved = errno;
  try {
    const PoolStats stats = pool().stats();
    held.carved = stats.arenaBytes;
    held.arenaLive = stats.bytesLive > stats.osLiveBytes ? stats.bytesLive - stats.osLiveBytes : 0;
    held.mappedBlocks = stats.osLiveBlocks;
    held.mappedBytes = stats.osLiveBytes;
  } catch (...) {  // std::bad_alloc from the stats' own bookkeeping: the next allocator's figures alone
  }
  errno = saved;
  return held;
}

uint64_t poolTrim() {
  return askServing([](Pool& serving) { return serving.trim(); });
}


TP_ALWAYS_RUN uint64_t defaultReserve() {
  constexpr uint64_t kUnlimited = uint64_t{16} << 30;
  // Start-up asks: where the address space has no limit (most processes), it calls nothing of os.cc, whose
  // code lies outside what always runs.
  if (os::addressSpaceLimit() == UINT64_MAX) return kUnlimited;
  const uint64_t left = os::addressSpaceLeft() / Pool::kLimitedSpareShare / os::kTrackGranule * os::kTrackGranule;
  return std::min(kUnlimited, left);
}

void queuedFreeFailed(ReleaseStatus status) { invalidFree(status); }

TP_ALWAYS_RUN Pool* madePool() { return made(); }
Pool* servingPool() { return makeOrServe(); }
TP_ALWAYS_RUN bool poolReady() { return ready.load(std::memory_order_acquire); }

TP_ALWAYS_RUN void preparePool(PoolRecipe* given) { recipe = given; }

TP_ALWAYS_RUN void startRouting(uint64_t minBytes, bool addressLimited) {
  ready.store(true, std::memory_order_release);
  detail::routeFrom.store(minBytes, std::memory_order_release);
  setMallocExtra(detail::kAddressLimited, addressLimited);
  // Nothing mapped and nothing shifted yet: free() goes straight to the next allocator (the bootstrap's blocks
  // included: its free is the bootstrap-aware one where the bootstrap was used).
  if (!os::mappingsTracked() && !detail::anyShifted.load(std::memory_order_acquire)) {
    detail::freeEntry.store(next.free.load(std::memory_order_acquire), std::memory_order_release);
  }
}

namespace {
// Whether the next allocator's blocks lie above the pool's memory, so that free() compares with trackedTo first:
// glibc's main arena lies below it (its brk heap; its thread arenas above take the second compare), the others'
// blocks wherever each maps them.
bool nextBlocksAbovePool() {
  if (nextIsGlibcMalloc()) return false;
  const int saved = errno;
  void* probe = next.malloc.load(std::memory_order_relaxed)(64);
  const bool above = reinterpret_cast<uintptr_t>(probe) >= os::detail::trackedTo.load(std::memory_order_acquire);
  next.free.load(std::memory_order_relaxed)(probe);
  errno = saved;
  return above;
}
}  // namespace

// Sequentially consistent, with anyShifted's store before the call: where the pool is made on one thread
// while another hands out its first shifted block, whichever store comes last in the single total order
// finds anyShifted set or is the shifted one's own, so freeEntry never ends on freeOutsidePool once it is.
void freeNeedsChecks() {
  detail::freeEntry.store(nextBlocksAbovePool() ? freeOutsidePoolAbove : freeOutsidePool, std::memory_order_seq_cst);
  if (detail::anyShifted.load(std::memory_order_seq_cst)) detail::freeEntry.store(freeOutsidePoolShifted, std::memory_order_seq_cst);
}

// The pair of freeNeedsChecks's: its caller stored anyShifted first (sequentially consistent), and freeEntry ends
// on freeOutsidePoolShifted whichever store comes last. Always run: a program that never makes the pool hands
// out shifted blocks too (an aligned allocation's), and needs no more of the pool's code for them.
TP_ALWAYS_RUN void freeLooksForShifts() { detail::freeEntry.store(freeOutsidePoolShifted, std::memory_order_seq_cst); }

void poolTicksOff() { setMallocExtra(detail::kPoolTicks, false); }

}  // namespace tp::preload

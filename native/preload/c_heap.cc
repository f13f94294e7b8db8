#include "c_heap.h"

#include <errno.h>
#include <malloc.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "next_allocator.h"
#include "always_run.h"
#include "process_pool.h"

namespace tp::preload {
namespace {

constexpr size_t kGlibcMmapThresholdMin = 128 * 1024;        // glibc's DEFAULT_MMAP_THRESHOLD_MIN
constexpr size_t kGlibcMmapThresholdMax = size_t{32} << 20;  // DEFAULT_MMAP_THRESHOLD_MAX on 64-bit
constexpr uint64_t kTrimAfterAtLeast = uint64_t{1} << 20;

std::atomic<bool> userSet{true};  // until initialiseCHeap has read the environment
std::atomic<size_t> raisedTo{kGlibcMmapThresholdMin};
std::atomic<uint64_t> freshTotal{0};      // what the pool took from the OS for its blocks, in all
std::atomic<uint64_t> freshSinceTrim{0};  // ... since the last malloc_trim
std::atomic<uintptr_t> heapHighWater{0};   // the highest the main heap's top has been, as cHeapTick saw it (0: not yet looked)

// The main heap's top, or 0 where sbrk cannot say.
uintptr_t heapTop() {
  void* top = sbrk(0);
  return top == reinterpret_cast<void*>(-1) ? 0 : reinterpret_cast<uintptr_t>(top);
}

// `bytes` rounded up to a multiple of an eighth of its power of two.
size_t step(size_t bytes) {
  size_t power = 1;
  while (power <= bytes / 2) power *= 2;
  const size_t eighth = power / 8;
  return (bytes + eighth - 1) / eighth * eighth;
}

void raiseThresholds(size_t bytes) {
  size_t to = step(bytes) > kGlibcMmapThresholdMax ? kGlibcMmapThresholdMax : step(bytes);
  size_t seen = raisedTo.load(std::memory_order_relaxed);
  do {
    if (to <= seen) return;
  } while (!raisedTo.compare_exchange_weak(seen, to, std::memory_order_relaxed));
  // Another thread may raise it further meanwhile and call mallopt before this one does: whoever finds
  // raisedTo above what it set sets that too, so the last mallopt is never a lower one.
  for (;;) {
    mallopt(M_MMAP_THRESHOLD, static_cast<int>(to));
    mallopt(M_TRIM_THRESHOLD, static_cast<int>(2 * to));
    const size_t now = raisedTo.load(std::memory_order_relaxed);
    if (now <= to) break;
    to = now;
  }
}

void countFresh(size_t bytes) {
  const uint64_t total = freshTotal.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  const uint64_t since = freshSinceTrim.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  const uint64_t due = total / 8 > kTrimAfterAtLeast ? total / 8 : kTrimAfterAtLeast;
  if (since < due) return;
  uint64_t expected = since;
  // One thread trims for what all have counted: the one that takes the count back to 0.
  while (expected >= due) {
    if (freshSinceTrim.compare_exchange_weak(expected, 0, std::memory_order_relaxed)) {
      next.trim.load(std::memory_order_relaxed)(0);
      return;
    }
  }
}

}  // namespace

TP_ALWAYS_RUN void initialiseCHeap() {
  const char* tunables = getenv("GLIBC_TUNABLES");
  const bool set = getenv("MALLOC_TRIM_THRESHOLD_") || getenv("MALLOC_MMAP_THRESHOLD_") ||
                   (tunables && (strstr(tunables, "malloc.trim_threshold") || strstr(tunables, "malloc.mmap_threshold")));
  userSet.store(set, std::memory_order_relaxed);
}

void cHeapBesidePool(size_t bytes, bool fresh) {
  const bool raise = bytes > raisedTo.load(std::memory_order_relaxed) && bytes <= kGlibcMmapThresholdMax &&
                     !userSet.load(std::memory_order_relaxed);
  if (!raise && !fresh) return;
  const int saved = errno;
  if (raise) raiseThresholds(bytes);
  if (fresh) countFresh(bytes);
  errno = saved;
}

void cHeapTick() {
  const uintptr_t top = heapTop();
  uintptr_t mark = heapHighWater.load(std::memory_order_relaxed);
  if (top <= mark) return;
  // The first look (the pool just made) only sets the mark: what the heap grew before is no growth beside it.
  if (mark == 0) {
    heapHighWater.compare_exchange_strong(mark, top, std::memory_order_relaxed);
    return;
  }
  // Claimed before it is given back, so that two threads never give back the same growth; unclaimed where the
  // pool could not (its lock held), unless the heap grew further meanwhile (then it is the newer growth's).
  if (!heapHighWater.compare_exchange_strong(mark, top, std::memory_order_relaxed)) return;
  if (poolPurgeSpansFor(top - mark)) return;
  uintptr_t claimed = top;
  heapHighWater.compare_exchange_strong(claimed, mark, std::memory_order_relaxed);
}

void cHeapResync() {
  if (heapHighWater.load(std::memory_order_relaxed) != 0) heapHighWater.store(heapTop(), std::memory_order_relaxed);
}

}  // namespace tp::preload

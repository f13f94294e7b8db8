#include "os/os.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <linux/perf_event.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older kernels answer EINVAL and we touch pages instead
#endif

namespace tp::os {

size_t pageSize() {
  static const size_t size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return size;
}

std::atomic<std::atomic<detail::TrackLeaf*>*> detail::trackDirectory{nullptr};
std::atomic<uint8_t> detail::trackedNear[detail::kNearEntries];  // static storage: zero, no constructor runs
std::atomic<uintptr_t> detail::trackedFrom{UINTPTR_MAX};
// In .data beside trackedFrom (zero, it would go to .bss): free() reads both, one page and cache line.
__attribute__((section(".data.tp_trackedTo"))) std::atomic<uintptr_t> detail::trackedTo{0};

namespace {
using detail::kGranuleShift;
using detail::kLeafGranules;
using detail::kLeafShift;
using detail::kTrackLeaves;
using detail::TrackLeaf;
using detail::trackDirectory;

// Leaves are handed out from pages mapped kLeafPage at a time and never given back (a GiB once used by the pool
// keeps its 64 bytes). Threads that map at once take leaves under a spin lock: leaves are made rarely.
constexpr size_t kLeafPage = size_t{64} << 10;
std::atomic_flag leafLock = ATOMIC_FLAG_INIT;
TrackLeaf* nextLeaf = nullptr;
TrackLeaf* leavesEnd = nullptr;

// The leaf of GiB `index`, made (zeroed) where there is none yet; nullptr where no page could be mapped for it.
TrackLeaf* leafOf(uint64_t index, bool make) {
  std::atomic<TrackLeaf*>& entry = trackDirectory.load(std::memory_order_acquire)[index];
  TrackLeaf* leaf = entry.load(std::memory_order_acquire);
  if (leaf || !make) return leaf;
  while (leafLock.test_and_set(std::memory_order_acquire)) {
  }
  leaf = entry.load(std::memory_order_acquire);
  if (!leaf) {
    if (nextLeaf == leavesEnd) {
      void* page = mmap(nullptr, kLeafPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (page != MAP_FAILED) {
        nextLeaf = static_cast<TrackLeaf*>(page);  // zero-filled: all-zero atomics
        leavesEnd = nextLeaf + kLeafPage / sizeof(TrackLeaf);
      }
    }
    if (nextLeaf != leavesEnd) {
      leaf = nextLeaf++;
      entry.store(leaf, std::memory_order_release);
    }
  }
  leafLock.clear(std::memory_order_release);
  return leaf;
}

// detail::trackedFrom at `at` at most, and detail::trackedTo at `end` at least (never the other way: unmarking
// leaves both where they were).
void widenTrackedBounds(uintptr_t at, uintptr_t end) {
  uintptr_t lowest = detail::trackedFrom.load(std::memory_order_acquire);
  while (at < lowest && !detail::trackedFrom.compare_exchange_weak(lowest, at, std::memory_order_acq_rel, std::memory_order_acquire)) {
  }
  uintptr_t highest = detail::trackedTo.load(std::memory_order_acquire);
  while (end > highest && !detail::trackedTo.compare_exchange_weak(highest, end, std::memory_order_acq_rel, std::memory_order_acquire)) {
  }
}

// Marks (or unmarks) the granules of [start, start + bytes). False where a leaf could not be made (marking):
// the granules marked by then are unmarked again.
bool markGranules(void* start, size_t bytes, bool on) {
  const uint64_t first = reinterpret_cast<uintptr_t>(start) >> kGranuleShift;
  const uint64_t end = (reinterpret_cast<uintptr_t>(start) + bytes + kTrackGranule - 1) >> kGranuleShift;
  const uint64_t granulesPerLeafShift = kLeafShift - kGranuleShift;
  if (on) widenTrackedBounds(first << kGranuleShift, end << kGranuleShift);  // before any entry is counted up
  for (uint64_t g = first; g < end && (g >> granulesPerLeafShift) < kTrackLeaves; ++g) {
    TrackLeaf* leaf = leafOf(g >> granulesPerLeafShift, on);
    if (!leaf) {
      if (on) markGranules(start, (g - first) << kGranuleShift, false);
      if (on) return false;
      continue;
    }
    const uint64_t within = g & (kLeafGranules - 1);
    const uint64_t bit = uint64_t{1} << (within & 63);
    // The folded table's entry counts each granule whose bit this call turns on or off (a granule already
    // in the state asked for is not counted twice): up before the bit is set, down after it is cleared, so
    // that mayBeTrackedMapping() is true wherever isTrackedMapping() may be. At most 64 granules share an
    // entry (2^47 / 2 TiB): a byte holds the count.
    std::atomic<uint8_t>& near = detail::trackedNear[g & (detail::kNearEntries - 1)];
    if (on) {
      near.fetch_add(1, std::memory_order_acq_rel);
      if (leaf->words[within >> 6].fetch_or(bit, std::memory_order_acq_rel) & bit) near.fetch_sub(1, std::memory_order_acq_rel);
    } else if (leaf->words[within >> 6].fetch_and(~bit, std::memory_order_acq_rel) & bit) {
      near.fetch_sub(1, std::memory_order_acq_rel);
    }
  }
  return true;
}

// A mapping whose granules could not be marked (no page for the table's leaves): unmapped, ENOMEM.
std::nullptr_t unmapRefused(void* start, size_t bytes) {
  munmap(start, bytes);
  errno = ENOMEM;
  return nullptr;
}

// mmap's result aligned to `alignment`: over-map by the slack, then give back the unaligned head and tail.
void* mapAligned(size_t bytes, size_t alignment) {
  const size_t page = pageSize();
  const size_t slack = alignment > page ? alignment - page : 0;
  void* raw = mmap(nullptr, bytes + slack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  if (slack == 0) return raw;
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + alignment - 1) & ~(uintptr_t{alignment} - 1);
  const size_t head = aligned - start;
  const size_t tail = slack - head;
  if (head) munmap(raw, head);
  if (tail) munmap(reinterpret_cast<void*>(aligned + bytes), tail);
  return reinterpret_cast<void*>(aligned);
}

// A tracked mapping owns whole granules, so that no other mapping shares a granule with it.
size_t trackedLength(size_t bytes) { return (bytes + kTrackGranule - 1) & ~(kTrackGranule - 1); }

// Where tracked mappings go: [96 TiB, 120 TiB) of the 128 TiB a process has. The kernel places mappings
// top-down from 127 TiB, and a program's own data and heap sit near 0, or near 85 TiB where it is
// position-independent: the range lies above the C library's brk heap and below the mappings the kernel
// places (the C library's thread arenas and mapped chunks, a --with allocator's memory), so that free() tells
// either from the pool's by one compare (detail::trackedFrom, detail::trackedTo).
constexpr uintptr_t kPlacedFrom = uintptr_t{96} << 40, kPlacedTo = uintptr_t{120} << 40;
// The origin, drawn once in [100 TiB, 116 TiB): mapGrowable's reservation starts there and grows up; every
// other tracked mapping is placed below it, at the highest free granules (first fit, top-down, as the kernel
// places its own), so that the growable one keeps the address space past its end.
constexpr uintptr_t kOriginFrom = uintptr_t{100} << 40, kOriginTo = uintptr_t{116} << 40;
constexpr int kPlacementTries = 4;
std::atomic<uintptr_t> origin{0};             // 0 until drawn
std::atomic<bool> placementRefused{false};    // a kernel before 4.17 (MAP_FIXED_NOREPLACE taken as a hint)

uintptr_t placementOrigin() {
  uintptr_t drawn = origin.load(std::memory_order_acquire);
  if (drawn) return drawn;
  const uintptr_t mine = kOriginFrom + (randomSeed() % ((kOriginTo - kOriginFrom) / kTrackGranule)) * kTrackGranule;
  return origin.compare_exchange_strong(drawn, mine, std::memory_order_acq_rel) ? mine : drawn;
}

// The word of the exact table that holds granule g (an address >> kGranuleShift): its granules' bits, bit
// (g & 63) g's; 0 where no leaf is made there.
uint64_t trackedWord(uint64_t g) {
  const TrackLeaf* leaf = leafOf(g >> (kLeafShift - kGranuleShift), false);
  return leaf ? leaf->words[(g & (kLeafGranules - 1)) >> 6].load(std::memory_order_acquire) : 0;
}

// An unaccounted reservation of exactly [at, at + bytes), where no mapping is there: `at`; else nullptr with
// errno (EEXIST where another mapping is there, or where a kernel before 4.17 took MAP_FIXED_NOREPLACE as a hint
// and mapped elsewhere: placementRefused is then set; ENOMEM under RLIMIT_AS).
void* reserveAt(uintptr_t at, size_t bytes) {
  void* start = mmap(reinterpret_cast<void*>(at), bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
  if (start == MAP_FAILED) return nullptr;
  if (start != reinterpret_cast<void*>(at)) {
    munmap(start, bytes);
    placementRefused.store(true, std::memory_order_relaxed);
    errno = EEXIST;
    return nullptr;
  }
  return start;
}

// A reservation of `bytes` (whole granules) aligned to `alignment` (a multiple of kTrackGranule) below the
// origin, at the highest granules no tracked mapping holds; nullptr where none is found or the kernel refuses
// (the caller then lets the kernel place it). Not marked yet. Two threads may pick the same granules: one is
// refused (EEXIST) and looks further down, as it does past another's mapping there.
void* mapPlaced(size_t bytes, size_t alignment) {
  if (placementRefused.load(std::memory_order_relaxed) || bytes > kOriginFrom - kPlacedFrom) return nullptr;
  const uint64_t span = bytes >> kGranuleShift, lowest = kPlacedFrom >> kGranuleShift;
  const uint64_t step = alignment >> kGranuleShift;
  uint64_t untracked = 0;  // granules no tracked mapping holds, counted down from the last one that does
  int tries = 0;
  for (uint64_t g = placementOrigin() >> kGranuleShift; g > lowest;) {
    --g;
    const uint64_t word = trackedWord(g);
    if ((g & 63) == 63 && word == ~uint64_t{0}) {  // 64 tracked granules: one step past them
      g -= 63;
      untracked = 0;
      continue;
    }
    if ((word >> (g & 63)) & 1) {
      untracked = 0;
      continue;
    }
    if (++untracked < span || g % step != 0) continue;
    void* start = reserveAt(g << kGranuleShift, bytes);
    if (start) return start;
    if (errno != EEXIST || placementRefused.load(std::memory_order_relaxed) || ++tries == kPlacementTries) return nullptr;
    untracked = 0;  // a mapping not tracked there, or another thread's: look below these granules
  }
  return nullptr;
}

// A tracked mapping's reservation: placed where it can be (mapPlaced), else where the kernel places it.
void* mapTracked(size_t bytes, size_t alignment) {
  void* start = mapPlaced(bytes, alignment);
  return start ? start : mapAligned(bytes, alignment);
}
}  // namespace

bool trackMappings() {
  if (trackDirectory.load(std::memory_order_acquire)) return true;
  void* raw = mmap(nullptr, kTrackLeaves * sizeof(TrackLeaf*), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return false;
  // Zero-filled pages are null atomics: no constructor needs to run over 1 MiB.
  trackDirectory.store(static_cast<std::atomic<TrackLeaf*>*>(raw), std::memory_order_release);
  return true;
}

namespace {
std::atomic<uint64_t> failCountdown[5];  // per Call: calls left until the injected failure; 0 = disarmed
std::atomic<uint64_t> bytesMapped{0};     // by mapMemory, not unmapped since

// Whether this call of `call` is the one to fail (and then disarms it).
bool injectedFailure(Call call) {
  std::atomic<uint64_t>& left = failCountdown[static_cast<size_t>(call)];
  uint64_t n = left.load(std::memory_order_relaxed);
  while (n != 0) {
    if (left.compare_exchange_weak(n, n - 1, std::memory_order_relaxed)) return n == 1;
  }
  return false;
}
}  // namespace

void failNthCall(Call call, uint64_t n) { failCountdown[static_cast<size_t>(call)].store(n, std::memory_order_relaxed); }

namespace {
// mapMemory and mapAccounted: the first `accounted` bytes of the mapping (a multiple of the page size, or
// 0) mapped again over the reservation without MAP_NORESERVE, so that the kernel checks and charges them
// now, before the mapping is tracked (a refused request of 64 TiB marks no granule).
void* mapRange(size_t bytes, size_t alignment, size_t accounted) {
  if (injectedFailure(Call::Map)) {
    errno = ENOMEM;
    return nullptr;
  }
  const bool tracked = trackDirectory.load(std::memory_order_acquire) != nullptr;
  if (tracked) {
    bytes = trackedLength(bytes);
    if (alignment < kTrackGranule) alignment = kTrackGranule;
  }
  void* start = tracked ? mapTracked(bytes, alignment) : mapAligned(bytes, alignment);
  if (!start) return nullptr;
  if (accounted && mmap(start, accounted, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED) {
    const int refused = errno;
    munmap(start, bytes);
    errno = refused;
    return nullptr;
  }
  if (tracked && !markGranules(start, bytes, true)) return unmapRefused(start, bytes);
  bytesMapped.fetch_add(bytes, std::memory_order_relaxed);
  return start;
}
}  // namespace

void* mapMemory(size_t bytes, size_t alignment) { return mapRange(bytes, alignment, 0); }

void* mapAccounted(size_t bytes, size_t alignment) {
  return mapRange(bytes, alignment, (bytes + pageSize() - 1) & ~(pageSize() - 1));
}

void* mapGrowable(size_t bytes) {
  if (!trackDirectory.load(std::memory_order_acquire)) return mapMemory(bytes, kTrackGranule);
  if (injectedFailure(Call::Map)) {
    errno = ENOMEM;
    return nullptr;
  }
  bytes = trackedLength(bytes);
  // At the origin; where another mapping is there, at a random granule above it.
  const uintptr_t from = placementOrigin(), granules = (kPlacedTo - from) / kTrackGranule;
  for (int attempt = 0; attempt < kPlacementTries && bytes < kPlacedTo - from && !placementRefused.load(std::memory_order_relaxed); ++attempt) {
    const uintptr_t at = attempt == 0 ? from : from + (randomSeed() % granules) * kTrackGranule;
    if (at + bytes > kPlacedTo) continue;
    void* start = reserveAt(at, bytes);
    if (!start) {
      if (errno == EEXIST) continue;
      break;  // ENOMEM (RLIMIT_AS): anywhere else would be refused as well, but mapMemory says so
    }
    if (!markGranules(start, bytes, true)) return unmapRefused(start, bytes);
    bytesMapped.fetch_add(bytes, std::memory_order_relaxed);
    return start;
  }
  return mapMemory(bytes, kTrackGranule);
}

int unmapMemory(void* start, size_t bytes) {
  if (isTrackedMapping(start)) {
    bytes = trackedLength(bytes);
    markGranules(start, bytes, false);
  }
  const int result = munmap(start, bytes);
  if (result == 0) bytesMapped.fetch_sub(bytes, std::memory_order_relaxed);
  return result;
}

// The tail starts on a granule boundary, so it is itself a tracked range of whole granules (or, untracked,
// of whole pages) that unmapMemory unmarks and unmaps.
int unmapTail(void* start, size_t bytes, size_t keep) { return unmapMemory(static_cast<char*>(start) + keep, bytes - keep); }

namespace {
constexpr int kReadWrite = PROT_READ | PROT_WRITE;
constexpr int kAnonymous = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED;

// [start, start + bytes) of a tracked mapping given back to the OS while its address space stays ours: an
// unaccounted reservation again where the kernel agrees, else its pages dropped (the charge then stays until
// the mapping is unmapped).
void releaseTail(char* start, size_t bytes) {
  if (bytes == 0) return;
  if (mmap(start, bytes, kReadWrite, kAnonymous | MAP_NORESERVE, -1, 0) == MAP_FAILED) madvise(start, bytes, MADV_DONTNEED);
}

// Maps the pages [start + oldBytes, start + newBytes) of a tracked mapping grown in place: charged, over its
// reservation. Pre: [start, start + trackedLength(newBytes)) is reserved by this mapping; newBytes > oldBytes.
// Post: true, or false with errno and [start + oldBytes, start + trackedLength(oldBytes)) reserved again.
bool mapGrowth(char* start, size_t oldBytes, size_t newBytes) {
  if (mmap(start + oldBytes, newBytes - oldBytes, kReadWrite, kAnonymous, -1, 0) != MAP_FAILED) return true;
  const int refused = errno;
  releaseTail(start + oldBytes, std::min(newBytes, trackedLength(oldBytes)) - oldBytes);  // should the kernel have dropped it
  errno = refused;
  return false;
}

// The granules [start + oldSpan, start + newSpan) just past a tracked mapping, reserved (reserveAt) and marked
// where no mapping is there: true, the mapping's reservation then reaches start + newSpan; else false with errno.
bool reserveAbove(char* start, size_t oldSpan, size_t newSpan) {
  void* above = reserveAt(reinterpret_cast<uintptr_t>(start + oldSpan), newSpan - oldSpan);
  if (!above) return false;
  if (!markGranules(above, newSpan - oldSpan, true)) return unmapRefused(above, newSpan - oldSpan) != nullptr;
  return true;
}

}  // namespace

bool extendMapping(void* start, size_t oldBytes, size_t newBytes) {
  if (!trackDirectory.load(std::memory_order_acquire)) {
    errno = EINVAL;
    return false;
  }
  if (injectedFailure(Call::Map)) {
    errno = ENOMEM;
    return false;
  }
  if (!reserveAbove(static_cast<char*>(start), oldBytes, newBytes)) return false;
  bytesMapped.fetch_add(newBytes - oldBytes, std::memory_order_relaxed);
  return true;
}

namespace {
// remapAccounted for a tracked mapping: it keeps whole granules of its own, so it grows inside its last
// granule where it can, then into the address space just past it where that is free, and otherwise moves into
// a fresh granule-aligned reservation (MREMAP_FIXED), the granules marked before the pages are there and
// unmarked before the old range is given up. Growing into the space past it matters for a buffer grown in
// steps: a move puts the mapping where the kernel finds room, usually just below its old place, which the
// move then frees, so the steps after it grow into that hole and the buffer moves about once each time it has
// doubled, as glibc's (which lets the kernel choose: MREMAP_MAYMOVE). Grown only inside its last granule, a
// buffer grown in steps would move at every second step.
void* remapTracked(char* start, size_t oldBytes, size_t newBytes) {
  const size_t oldSpan = trackedLength(oldBytes), newSpan = trackedLength(newBytes);
  if (newSpan > oldSpan && reserveAbove(start, oldSpan, newSpan)) {
    if (!mapGrowth(start, oldBytes, newBytes)) {
      const int refused = errno;
      markGranules(start + oldSpan, newSpan - oldSpan, false);
      munmap(start + oldSpan, newSpan - oldSpan);
      errno = refused;
      return nullptr;
    }
    bytesMapped.fetch_add(newSpan - oldSpan, std::memory_order_relaxed);
    return start;
  }
  if (newSpan <= oldSpan) {
    if (newBytes > oldBytes && !mapGrowth(start, oldBytes, newBytes)) return nullptr;
    if (newSpan < oldSpan) {
      markGranules(start + newSpan, oldSpan - newSpan, false);
      if (munmap(start + newSpan, oldSpan - newSpan) != 0) {
        const int refused = errno;
        markGranules(start + newSpan, oldSpan - newSpan, true);
        errno = refused;
        return nullptr;
      }
      bytesMapped.fetch_sub(oldSpan - newSpan, std::memory_order_relaxed);
    }
    if (newBytes < oldBytes) releaseTail(start + newBytes, std::min(oldBytes, newSpan) - newBytes);
    return start;
  }
  char* moved = static_cast<char*>(mapTracked(newSpan, kTrackGranule));
  if (!moved) return nullptr;
  if (mmap(moved + oldBytes, newBytes - oldBytes, kReadWrite, kAnonymous, -1, 0) == MAP_FAILED) {
    const int refused = errno;
    munmap(moved, newSpan);
    errno = refused;
    return nullptr;
  }
  if (!markGranules(moved, newSpan, true)) return unmapRefused(moved, newSpan);
  markGranules(start, oldSpan, false);
  if (mremap(start, oldBytes, oldBytes, MREMAP_MAYMOVE | MREMAP_FIXED, moved) == MAP_FAILED) {
    const int refused = errno;  // EFAULT: the range is no longer one mapping of the kernel's (nothing moved)
    markGranules(start, oldSpan, true);
    markGranules(moved, newSpan, false);
    munmap(moved, newSpan);
    errno = refused;
    return nullptr;
  }
  munmap(start + oldBytes, oldSpan - oldBytes);  // the old reservation's tail (its head moved away)
  bytesMapped.fetch_add(newSpan - oldSpan, std::memory_order_relaxed);
  return moved;
}
}  // namespace

void* remapAccounted(void* start, size_t oldBytes, size_t newBytes) {
  if (injectedFailure(Call::Map)) {
    errno = ENOMEM;
    return nullptr;
  }
  if (isTrackedMapping(start)) return remapTracked(static_cast<char*>(start), oldBytes, newBytes);
  void* moved = mremap(start, oldBytes, newBytes, MREMAP_MAYMOVE);
  if (moved == MAP_FAILED) return nullptr;
  if (newBytes > oldBytes) bytesMapped.fetch_add(newBytes - oldBytes, std::memory_order_relaxed);
  else bytesMapped.fetch_sub(oldBytes - newBytes, std::memory_order_relaxed);
  return moved;
}

uint64_t mappedBytes() { return bytesMapped.load(std::memory_order_relaxed); }

int populateInPlace(void* start, size_t bytes) {
  if (bytes == 0) return 0;
  if (injectedFailure(Call::Populate)) {
    errno = ENOMEM;
    return -1;
  }
  return madvise(start, bytes, MADV_POPULATE_WRITE);
}

int populateMemory(void* start, size_t bytes) {
  if (populateInPlace(start, bytes) == 0) return 0;
  if (errno != EINVAL) return -1;
  // Old kernel: a read-modify-write of one byte per page faults it in for writing and keeps its contents.
  volatile char* p = static_cast<volatile char*>(start);
  const size_t page = pageSize();
  for (size_t off = 0; off < bytes; off += page) p[off] = p[off];
  return 0;
}

int discardMemory(void* start, size_t bytes) {
  if (bytes == 0) return 0;
  if (injectedFailure(Call::Discard)) {
    errno = ENOMEM;
    return -1;
  }
  return madvise(start, bytes, MADV_DONTNEED);
}

int adviseHugePages(void* start, size_t bytes) { return madvise(start, bytes, MADV_HUGEPAGE); }

int lockMemory(void* start, size_t bytes) {
  if (injectedFailure(Call::Lock)) {
    errno = EAGAIN;
    return -1;
  }
  return mlock(start, bytes);
}

uint64_t lockLimitBytes() {
  struct rlimit limit;
  if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return UINT64_MAX;
  return static_cast<uint64_t>(limit.rlim_cur);
}

uint64_t physicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  return pages > 0 ? static_cast<uint64_t>(pages) * pageSize() : UINT64_MAX;
}

void* allocateHeap(size_t bytes, size_t alignment) {
  if (injectedFailure(Call::Heap)) return nullptr;
  void* p = nullptr;
  return posix_memalign(&p, alignment, bytes) == 0 ? p : nullptr;
}

void freeHeap(void* start) { free(start); }

bool isMainThread() { return syscall(SYS_gettid) == getpid(); }

static FaultCounts usageFaults(int who) {
  struct rusage usage;
  if (getrusage(who, &usage) != 0) return {};
  return {static_cast<uint64_t>(usage.ru_minflt), static_cast<uint64_t>(usage.ru_majflt)};
}

FaultCounts processFaults() { return usageFaults(RUSAGE_SELF); }
FaultCounts threadFaults() { return usageFaults(RUSAGE_THREAD); }

int openFaultCounter(bool major) {
  struct perf_event_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.type = PERF_TYPE_SOFTWARE;
  attr.size = sizeof attr;
  attr.config = major ? PERF_COUNT_SW_PAGE_FAULTS_MAJ : PERF_COUNT_SW_PAGE_FAULTS_MIN;
  attr.exclude_kernel = 1;  // faults taken by user code; required at perf_event_paranoid 2
  attr.exclude_hv = 1;
  return static_cast<int>(syscall(SYS_perf_event_open, &attr, 0 /* this thread */, -1 /* any cpu */, -1, 0));
}

int readCounter(int fd, uint64_t* value) {
  return read(fd, value, sizeof *value) == static_cast<ssize_t>(sizeof *value) ? 0 : -1;
}

void closeCounter(int fd) {
  if (fd >= 0) close(fd);
}

// Reads a small /proc file into buf (NUL-terminated). Returns the length or -1.
static ssize_t readProcFile(const char* path, char* buf, size_t cap) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, cap - 1);
  close(fd);
  if (n < 0) return -1;
  buf[n] = '\0';
  return n;
}

uint64_t addressSpaceLeft() {
  const uint64_t limit = addressSpaceLimit();
  if (limit == UINT64_MAX) return UINT64_MAX;
  const uint64_t mapped = addressSpaceUsed();
  return limit > mapped ? limit - mapped : 0;
}

uint64_t addressSpaceUsed() {
  char buf[128];
  return readProcFile("/proc/self/statm", buf, sizeof buf) < 0 ? 0 : strtoull(buf, nullptr, 10) * pageSize();
}

uint64_t residentBytes() {
  char buf[128];
  if (readProcFile("/proc/self/statm", buf, sizeof buf) < 0) return 0;
  char* end = nullptr;
  strtoull(buf, &end, 10);  // first field: total program size; the second is the resident set
  return strtoull(end, nullptr, 10) * pageSize();
}

CHeapBytes cHeapBytes() {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  const struct mallinfo2 info = mallinfo2();
  return {info.uordblks + info.hblkhd, info.fordblks};
#else
  return {};
#endif
}

uint64_t peakResidentBytes() {
  char buf[4096];
  if (readProcFile("/proc/self/status", buf, sizeof buf) < 0) return 0;
  const char* line = strstr(buf, "VmHWM:");
  if (!line) return 0;
  return strtoull(line + 6, nullptr, 10) * 1024;  // the kernel prints kB
}

int resetPeakResident() {
  int fd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = write(fd, "5", 1);
  close(fd);
  return n == 1 ? 0 : -1;
}

uint64_t monotonicNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t coarseMonotonicNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t coarseResolutionNs() {
  struct timespec ts;
  if (clock_getres(CLOCK_MONOTONIC_COARSE, &ts) != 0) return 1;
  const uint64_t ns = static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
  return ns == 0 ? 1 : ns;
}

uint64_t randomSeed() {
  uint64_t seed = 0;
  if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof seed)) {
    seed = monotonicNs() ^ (static_cast<uint64_t>(getpid()) << 32);
  }
  return seed | 1;
}

}  // namespace tp::os

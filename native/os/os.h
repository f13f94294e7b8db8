// The operating-system layer. Every system call the core makes goes through this file and os.cc, so the
// rest of native/ is plain C++ and each call's contract is written down once, here.
//
// Conventions: functions that can fail return 0 / a valid pointer on success and -1 / nullptr on failure
// with errno left set by the failing call; none of them throws and none of them allocates on the C++ heap.
#pragma once

#include <sys/resource.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace tp::os {

// Fault injection, for tests (test/native/fault_injection_test.cc): the n-th call of `call` from now on
// (n >= 1) fails as the kernel or the C library would refuse it — mmap and the madvise calls with ENOMEM,
// mlock with EAGAIN, the heap with nullptr — once; n = 0 disarms it. Process-wide; a disarmed hook costs
// one relaxed atomic load per call.
enum class Call : uint8_t { Map, Populate, Discard, Lock, Heap };
void failNthCall(Call call, uint64_t n);

// The kernel's base page size (4096 on x86-64). Constant for the life of the process.
size_t pageSize();

// Size of a transparent huge page (2 MiB on x86-64).
constexpr size_t kHugePageSize = size_t{2} << 20;

// Maps `bytes` of private anonymous read-write memory whose start is a multiple of `alignment`.
// Pre:  bytes > 0 and a multiple of pageSize(); alignment is a power of two >= pageSize().
// Post: success returns the start; no page is resident yet (call populateMemory to fault them in).
//       Failure returns nullptr, leaves nothing mapped and errno set (ENOMEM when the address space or the
//       overcommit policy refuses).
void* mapMemory(size_t bytes, size_t alignment);

// As mapMemory, for memory that will be used rather than reserved: the first `bytes` (rounded up to a page)
// are charged to the kernel's commit accounting, as the C library's malloc mappings are (mapMemory's are
// not: MAP_NORESERVE). Under the default heuristic overcommit policy a request larger than RAM + swap then
// fails with ENOMEM, as malloc's does; under strict accounting, one beyond the commit limit.
// Release with unmapMemory(start, bytes).
void* mapAccounted(size_t bytes, size_t alignment);

// Pre:  [start, start + bytes) is exactly a range returned by mapMemory, mapAccounted or remapAccounted (same
//       length).
// Post: the range is unmapped; any later access faults. Returns 0, or -1 with errno.
int unmapMemory(void* start, size_t bytes);

// Gives up the tail of a mapping made by mapMemory, from `keep` on: its address space, not memory the
// caller uses. Pre: [start, start + bytes) is exactly such a range (same length); keep is a multiple of
// kTrackGranule with 0 < keep < bytes. Post: 0, and the mapping is [start, start + keep) (release it with
// unmapMemory(start, keep)); or -1 with errno, the mapping unchanged.
int unmapTail(void* start, size_t bytes, size_t keep);

// Resizes a mapping made by mapAccounted without copying its contents (mremap: the kernel moves the page
// tables, as the C library's realloc does for its own mapped chunks), so that a growing buffer never holds
// two copies of itself.
// Pre:  [start, start + oldBytes) is exactly a range returned by mapAccounted(oldBytes, pageSize()) or by
//       remapAccounted (same length), not locked; newBytes > 0 and a multiple of pageSize().
// Post: success returns the start of the resized mapping (start itself, or another address: the old range is
//       then unmapped), page-aligned, its first min(oldBytes, newBytes) bytes those of the old range, the rest
//       zero, all of it charged to the commit accounting as mapAccounted's; release it with
//       unmapMemory(result, newBytes). Failure returns nullptr with errno set (ENOMEM when the address space or
//       the overcommit policy refuses) and leaves the old range exactly as it was.
void* remapAccounted(void* start, size_t oldBytes, size_t newBytes);

// mapMemory for a reservation that is to grow in place (extendMapping): placed, where the kernel agrees, at the
// origin of the tracked mappings' range (a granule drawn at random once in an address range the kernel's own
// placement leaves alone: it maps top-down from below the stack, and the program's heap grows up from its
// data), the other tracked mappings lying below it, so that the address space past its end stays free; else
// where mapMemory would place it. Pre and post as mapMemory's, with `alignment` kTrackGranule.
void* mapGrowable(size_t bytes);
// Grows a mapping made by mapMemory or mapGrowable in place, while tracking is on: the granules
// [start + oldBytes, start + newBytes) are reserved and tracked where no mapping is there yet.
// Pre:  [start, start + oldBytes) is such a mapping (same length); oldBytes and newBytes are multiples of
//       kTrackGranule, newBytes > oldBytes.
// Post: true, the mapping is [start, start + newBytes) (release it with unmapMemory(start, newBytes)); or false
//       with errno (EEXIST: another mapping is there; ENOMEM: RLIMIT_AS), the mapping unchanged.
bool extendMapping(void* start, size_t oldBytes, size_t newBytes);

// Bytes mapped by mapMemory and not unmapped since, process-wide: what the tests check for leaks.
uint64_t mappedBytes();

// Tracking of this layer's mappings, for the process allocator (native/preload): free() must tell our
// memory from the C library's for any pointer, on every call, without a lock or a system call.
// Once tracking is on, mapMemory aligns every mapping to kTrackGranule and reserves whole granules (the
// tail stays untouched, so it costs address space, not memory), places them together (the highest free
// granules below mapGrowable's origin, where the kernel agrees), and marks them in a process-wide table: for
// each GiB of the 47-bit user space, a bitmap of its granules, made the first time a mapping there is tracked
// (64 bytes each, in pages mapped as needed), found from a directory of 1 MiB of address space (faulted in
// only where written or read). Under an RLIMIT_AS the table costs the program little of its address space.
constexpr size_t kTrackGranule = size_t{2} << 20;
// Pre:  called before any other thread maps memory through this layer; mappings made before are not tracked.
// Post: true, or false with errno when the directory could not be mapped (nothing is tracked then). Idempotent.
bool trackMappings();
// Whether `p` lies in a mapping made by mapMemory since trackMappings(), and not unmapped since. Any value of
// p is allowed (it is compared, never followed); false while tracking is off. Inline: free() asks it of
// every pointer, and a program's start-up frees hundreds of thousands.
namespace detail {
constexpr unsigned kGranuleShift = 21;
constexpr unsigned kLeafShift = 30;  // a leaf of the table: the granules of 1 GiB
constexpr size_t kLeafGranules = size_t{1} << (kLeafShift - kGranuleShift);
struct TrackLeaf {
  std::atomic<uint64_t> words[kLeafGranules / 64];
};
constexpr size_t kTrackLeaves = (uint64_t{1} << 47) >> kLeafShift;  // the directory's entries
__attribute__((visibility("hidden"))) extern std::atomic<std::atomic<TrackLeaf*>*> trackDirectory;  // null until trackMappings()
// The table folded: for each granule g, how many tracked granules share g's entry (g modulo kNearEntries,
// every 2 TiB of address space alike). Never less than that: an entry is counted up before a granule's bit is
// set and down after it is cleared. One flat array in the library's own image (1 MiB of address space, its
// pages faulted in only where read or written): one load, at an address known at link time.
constexpr unsigned kNearBits = 20;
constexpr size_t kNearEntries = size_t{1} << kNearBits;
__attribute__((visibility("hidden"))) extern std::atomic<uint8_t> trackedNear[kNearEntries];
// The lowest address any granule was tracked at since trackMappings() (UINTPTR_MAX before), and the end of the
// highest (0 before): widened before a granule's entry is counted up, never narrowed. Outside them no pointer
// is the pool's: free()'s first look, one compare, where the C library's brk heap lies (below the tracked
// mappings) or where the kernel places mappings (above them: tracked mappings are placed in [96 TiB, 120 TiB)
// where the kernel agrees, mapMemory).
__attribute__((visibility("hidden"))) extern std::atomic<uintptr_t> trackedFrom;
__attribute__((visibility("hidden"))) extern std::atomic<uintptr_t> trackedTo;
}  // namespace detail
// Whether trackMappings() has run: until then no pointer is a tracked mapping.
inline bool mappingsTracked() { return detail::trackDirectory.load(std::memory_order_acquire) != nullptr; }
// Whether `p` may lie in a tracked mapping: false means it does not (it lies below or above every granule
// tracked so far, or no tracked granule shares its entry of the folded table); true, that isTrackedMapping must
// tell. Any p, never followed; lock-free. free()'s look at every pointer once the pool exists: two compares,
// then (between trackedFrom and trackedTo) a shift, a mask and one load.
inline bool mayBeTrackedMapping(const void* p) {
  const uint64_t at = reinterpret_cast<uintptr_t>(p);
  if (at < detail::trackedFrom.load(std::memory_order_acquire)) return false;
  if (at >= detail::trackedTo.load(std::memory_order_acquire)) return false;
  return detail::trackedNear[(at >> detail::kGranuleShift) & (detail::kNearEntries - 1)].load(std::memory_order_acquire) != 0;
}
inline bool isTrackedMapping(const void* p) {
  std::atomic<detail::TrackLeaf*>* directory = detail::trackDirectory.load(std::memory_order_acquire);
  const uint64_t at = reinterpret_cast<uintptr_t>(p);
  if (!directory || (at >> detail::kLeafShift) >= detail::kTrackLeaves) return false;
  const detail::TrackLeaf* leaf = directory[at >> detail::kLeafShift].load(std::memory_order_acquire);
  if (!leaf) return false;
  const uint64_t g = (at >> detail::kGranuleShift) & (detail::kLeafGranules - 1);
  return (leaf->words[g >> 6].load(std::memory_order_acquire) >> (g & 63)) & 1;
}

// Faults every page of [start, start + bytes) in for writing now, so that first touches later take no page
// fault. Contents are preserved (pages already resident are left as they are).
// Pre:  the range is mapped read-write by mapMemory; start is page-aligned.
// Post: every page is resident (unless the system is out of memory: -1, errno ENOMEM/EFAULT).
int populateMemory(void* start, size_t bytes);

// The same without writing a byte (MADV_POPULATE_WRITE), so that other threads may read and write the range
// meanwhile. -1 with errno EINVAL where the kernel cannot (before Linux 5.14): the pages then fault in where
// they are first touched.
int populateInPlace(void* start, size_t bytes);

// Gives the pages of the range back to the OS (MADV_DONTNEED) while keeping it mapped: resident memory
// drops now, and the next touch of a page faults in a zero page.
// Pre:  the range lies in a mapping made by mapMemory and is not locked; start and bytes are multiples of
//       pageSize().
// Post: 0, or -1 with errno (the range is then unchanged).
int discardMemory(void* start, size_t bytes);

// Asks for transparent huge pages on the range (MADV_HUGEPAGE). Advice only: 0 does not promise huge pages.
int adviseHugePages(void* start, size_t bytes);

// Locks the range in RAM (mlock): page-locked host memory that is never swapped out. Faults pages in.
// Failure is usually EPERM/ENOMEM from RLIMIT_MEMLOCK; see lockLimitBytes().
int lockMemory(void* start, size_t bytes);

// The soft RLIMIT_MEMLOCK in bytes (UINT64_MAX when unlimited).
uint64_t lockLimitBytes();

// The machine's physical memory in bytes (what os.totalmem() says in Node).
uint64_t physicalMemoryBytes();

// Address space the process may still map under its RLIMIT_AS (`ulimit -v`): the soft limit less what is
// mapped now. UINT64_MAX when unlimited.
uint64_t addressSpaceLeft();
// The soft RLIMIT_AS in bytes (`ulimit -v`); UINT64_MAX when unlimited or where getrlimit fails. Inline: the
// preload library's start-up asks it, and its code then lies with the caller's (preload/always_run.h).
inline uint64_t addressSpaceLimit() {
  struct rlimit limit;
  return getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY ? UINT64_MAX : limit.rlim_cur;
}
// Address space the process maps now (what RLIMIT_AS counts): /proc/self/statm's size.
uint64_t addressSpaceUsed();

// Heap memory for small OS fallbacks: `bytes` with the given power-of-two alignment (>= sizeof(void*)).
// Returns nullptr when the C library refuses. Release with freeHeap.
void* allocateHeap(size_t bytes, size_t alignment);
void freeHeap(void* start);

struct FaultCounts {
  uint64_t minor = 0;
  uint64_t major = 0;
};

// Whether the calling thread is the process's main thread (its thread id is the process id).
bool isMainThread();

// Page faults taken so far by the whole process / by the calling thread (getrusage).
FaultCounts processFaults();
FaultCounts threadFaults();

// Opens a perf_event software counter of page faults (minor or major) on the calling thread, counting user
// space only (allowed at perf_event_paranoid <= 2). Returns a file descriptor, or -1 with errno (EACCES or
// EPERM when the kernel forbids it, ENOSYS/ENOENT where perf events do not exist).
int openFaultCounter(bool major);
// Reads a counter opened by openFaultCounter. Returns 0 and sets *value, or -1 with errno.
int readCounter(int fd, uint64_t* value);
void closeCounter(int fd);

// Resident set size of the process now, and its high-water mark since start or since resetPeakResident().
uint64_t residentBytes();
uint64_t peakResidentBytes();
// Resets the high-water mark to the current RSS (writes 5 to /proc/self/clear_refs). Returns 0 or -1.
int resetPeakResident();

// The C library's heap, all its arenas: bytes in blocks handed out (mapped ones included) and bytes it
// holds free. Both 0 where the C library cannot say (not glibc >= 2.33).
struct CHeapBytes {
  uint64_t inUse = 0;
  uint64_t free = 0;
};
CHeapBytes cHeapBytes();

// Monotonic clock in nanoseconds (vDSO; no system call on x86-64).
uint64_t monotonicNs();
// The same clock as the kernel last saw it at a tick (CLOCK_MONOTONIC_COARSE): never runs backwards, lags
// monotonicNs() by at most one tick (coarseResolutionNs(), 1-10 ms), and costs less (vDSO, no clock
// read), for timing periods of milliseconds on every malloc. Its values
// compare only with its own: one taken after a monotonicNs() may be smaller.
uint64_t coarseMonotonicNs();
// A tick of coarseMonotonicNs() in nanoseconds (clock_getres; 1 where the system cannot say).
uint64_t coarseResolutionNs();

// 64 bits from the kernel's random source, for per-pool header secrets.
uint64_t randomSeed();

}  // namespace tp::os

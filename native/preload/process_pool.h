// The process pool: one Pool for the whole process, made at the first request it serves (a process that
// makes none maps nothing), from what start-up read (startup.cc, options.h), serving the requests the malloc
// family (malloc_route.h) routes to it, and the preload library's other parts' questions of it. Every call
// here takes care of errno (as the C library's calls would leave it) and of this thread's allocations while
// it is inside the pool (they go to the C library).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/pool.h"
#include "os/os.h"

namespace tp::preload {

// While a thread is inside the process pool (or setting it up), its own allocations — the pool's vectors
// and sets, the C library's internals — must go to the C library, not back into the pool's lock.
class InternalScope {
 public:
  InternalScope();
  ~InternalScope();
  InternalScope(const InternalScope&) = delete;
  InternalScope& operator=(const InternalScope&) = delete;
};

// Declared hidden (as -fvisibility=hidden defines them), so that the hot path reads them directly, not through
// the global offset table: malloc's path below the threshold is then one load, a compare and a jump.
namespace detail {
// The smallest request the pool serves: SIZE_MAX until the pool is ready, then TENSORPOOL_MIN_BYTES.
__attribute__((visibility("hidden"))) extern std::atomic<size_t> routeFrom;
// What malloc does below the threshold besides calling the next allocator, as bits: one load on every malloc.
// kAddressLimited: addressSpaceLimited(). kPoolTicks: the pool is made and decays, and every so many mallocs
// give it a turn (decay's, poolDecayTick, and glibc's heap held against its free memory, cHeapTick).
enum MallocExtra : uint8_t { kAddressLimited = 1, kPoolTicks = 2 };
__attribute__((visibility("hidden"))) extern std::atomic<uint8_t> mallocExtras;
// The hot path's three words. A malloc of fewer bytes than fastBelow goes to mallocBelow (one compare):
// fastBelow is routeFrom unless an address space limit is set (kAddressLimited: 0, every malloc through the
// slow path, which may retry); mallocBelow is the next allocator's malloc, or mallocCounted while the pool
// ticks (kPoolTicks). free() calls freeEntry: the next allocator's free until a pointer may need a look (the
// pool mapped memory, or a shifted aligned block was handed out: anyShifted), from then on, for good,
// freeOutsidePool (freeOutsidePoolShifted once anyShifted): the pool's memory told apart in a few instructions
// (os::mayBeTrackedMapping; one or two compares outside the tracked addresses), freeWithChecks for a pointer that
// may be in it.
__attribute__((visibility("hidden"))) extern std::atomic<size_t> fastBelow;
__attribute__((visibility("hidden"))) extern std::atomic<void* (*)(size_t)> mallocBelow;
__attribute__((visibility("hidden"))) extern std::atomic<void (*)(void*)> freeEntry;
__attribute__((visibility("hidden"))) extern std::atomic<bool> anyShifted;
// Initial-exec TLS: a preloaded library gets static TLS, and reading it never calls malloc (general-dynamic
// TLS may, on a thread's first access).
__attribute__((visibility("hidden"))) extern constinit thread_local unsigned insideDepth __attribute__((tls_model("initial-exec")));
}  // namespace detail

// Whether a request of `bytes` may go to the pool: the pool is ready and the request is at least the
// threshold. One load and one compare, no thread-local access: what every malloc of the process asks first.
inline bool mayRouteToPool(size_t bytes) { return bytes >= detail::routeFrom.load(std::memory_order_acquire); }
// Whether a request of `bytes` goes to the pool: it may, and this thread is not inside the pool.
// Inline, as ownedByPool: every malloc and free of the process asks.
inline bool routesToPool(size_t bytes) { return mayRouteToPool(bytes) && detail::insideDepth == 0; }
// Whether the process has an RLIMIT_AS (at start, or set since through setrlimit): only then can a request
// that failed succeed after the pool gave back its spare reservation (poolGaveBackSpare).
inline bool addressSpaceLimited() { return detail::mallocExtras.load(std::memory_order_relaxed) & detail::kAddressLimited; }
// Whether `p` lies in memory the pool mapped (any p; never dereferenced). Lock-free.
inline bool ownedByPool(const void* p) { return os::isTrackedMapping(p); }
// Whether the pool has mapped anything: until it has, no pointer is the pool's. One load.
inline bool poolMapsAny() { return os::mappingsTracked(); }

// What the pool is made of, from start-up until the first request it serves makes it: a plan file's classes or
// the default classes (built when the pool is made, not at load: their code stays out of the pages a program
// that never makes the pool holds, always_run.h), with the reserve of a plan of the spans kind.
struct PoolRecipe {
  PlanSpec* plan = nullptr;  // owned, or nullptr: the default classes
  uint64_t spanReserve = 0;
  PoolOptions options;
  bool record = false;        // recording from the start
  uint64_t recordEvents = 0;
  bool reserveGiven = false;  // TENSORPOOL_RESERVE set: taken as it is (else bounded by a limit set since)
};
// Start-up (startup.cc): the recipe (owned from now on), then routing from `minBytes` on.
void preparePool(PoolRecipe* recipe);
void startRouting(uint64_t minBytes, bool addressLimited);
// Whether start-up has finished with a valid configuration (the pool may serve).
bool poolReady();
// The pool once made, else nullptr (never makes it).
Pool* madePool();
// The pool, made now if it is not yet; nullptr when making it failed (the process is then on the C library, one
// line on stderr says why) or the configuration was bad.
Pool* servingPool();
// Address space the default classes reserve at first: 16 GiB, or under an RLIMIT_AS (`ulimit -v`) a share of
// what the limit leaves (Pool::kLimitedSpareShare), so that the program's own mappings find the rest free; the
// arena grows in place past it as it needs (ArenaOptions::growInPlace).
uint64_t defaultReserve();
// A free() the pool queued (another thread held its lock) that started no live block: found by the thread that
// applies it, which stops the process as the freeing thread would have (glibc's message, then abort).
[[noreturn]] void queuedFreeFailed(ReleaseStatus status);

// free()'s whole routing (overrides.cc): the exact table, then the pool's free or the next allocator's. What
// freeOutsidePool calls for a pointer that may be the pool's, and freeEntry until start-up has routed.
void freeWithChecks(void* p);
// freeEntry once a pointer may need a look (overrides.cc): freeWithChecks where os::mayBeTrackedMapping(p),
// else a tail call of the next allocator's free (freeOutsidePoolShifted: after nextStart's look for a shift).
void freeOutsidePool(void* p);
void freeOutsidePoolShifted(void* p);
// freeOutsidePool with its compares the other way round (os::detail::trackedTo first), where the next
// allocator's blocks lie above the pool's memory (jemalloc's: mappings the kernel placed top-down), not below it
// (glibc's brk heap, tcmalloc's, mimalloc's segments at its own hint addresses).
void freeOutsidePoolAbove(void* p);
// mallocBelow while the pool ticks (overrides.cc): the next allocator's malloc, and every kMallocsPerTick-th
// call on a thread the pool's turn first (malloc_route.h, mallocTick).
void* mallocCounted(size_t bytes);
// mallocBelow until start-up routes: the next allocator's malloc, whatever it is by then.
void* mallocThroughNext(size_t bytes);
// From now on every free() takes freeOutsidePool (freeOutsidePoolAbove where the next allocator is not glibc's
// malloc and a block of its own, made and freed here, lies above the pool's memory), or freeOutsidePoolShifted
// once anyShifted is set (which the caller that sets it stores first).
// Pre: before the first pointer that needs it is handed out; the pool's memory mapped (os::detail::trackedTo).
void freeNeedsChecks();
// A block of the next allocator's has been handed out shifted (malloc_route.h's nextAligned, after it set
// anyShifted): every free looks for a shift from now on (freeOutsidePoolShifted), the pool made or not.
void freeLooksForShifts();
// Decay's turns from the C library's mallocs (kPoolTicks) stop while the pool holds no memory decay could give
// back, and start again at the pool's next release (malloc's path is then a compare and a jump).
void poolTicksOff();

// Whether this thread is inside the pool now (InternalScope, enterPool): it may hold the pool's locks.
bool insidePool();
// InternalScope's two halves, for a scope that is not a C++ block (fork's handlers).
void enterPool();
void leavePool();
// The pool's locks, taken (in the order its own calls take them) and released around fork() (fork.cc).
void lockPoolForFork();
void unlockPoolAfterFork(bool child);

// A block of `bytes` from the pool, 64-byte aligned, or nullptr when the pool cannot serve it (errno
// untouched: the C library is then asked). *zero, when given: whether the block reads as zero (calloc).
void* poolAlloc(size_t bytes, bool* zero = nullptr);
// Gives a block back. Pre: ownedByPool(p). A pointer inside the pool that starts no live block (a double
// free, a pointer into a block) aborts the process with glibc's message, as glibc would.
void poolFree(void* p);
// poolFree for a block realloc moved elsewhere: its pages go back at once (Pool::releaseMoved).
void poolFreeMoved(void* p);
// Bytes the live block at p was allocated with (0 when p starts none). Pre: ownedByPool(p).
size_t poolUsableSize(const void* p);
// realloc in place: whether the live block at p now holds `bytes` (its capacity allows; Pool::resizeInPlace).
// Pre: ownedByPool(p).
bool poolResizeInPlace(void* p, size_t bytes);
// realloc of a block the OS mapped (Pool::resizeMapped): where the block now is, its pages moved rather than
// copied, or nullptr (nothing changed, errno untouched). Pre: ownedByPool(p).
void* poolResizeMapped(void* p, size_t bytes);
// realloc of a pool block that cannot grow in place, growing large: a block of `bytes` in a mapping of its
// own (Pool::allocMoved), whose later growth poolResizeMapped serves; the caller copies and frees the old
// one (poolFreeMoved). nullptr (errno untouched) where the pool declines or cannot: the caller moves the
// block as any other.
void* poolAllocMoved(size_t bytes);
// malloc_trim: the pages of the pool's free blocks and spans go back to the OS now (Pool::trim). Returns the
// bytes given back (0 before the pool is made, and on a thread inside the pool, which may hold its lock).
uint64_t poolTrim();
// What the pool holds, for mallinfo and mallinfo2 (interpose.cc adds it to the next allocator's figures):
// all zero before the pool is made and on a thread inside the pool (which may hold its lock).
struct PoolHeld {
  uint64_t carved = 0;      // the arena's memory carved for blocks (glibc's `arena`: its heap)
  uint64_t arenaLive = 0;   // bytes asked for by the live blocks there (`uordblks`)
  uint64_t mappedBlocks = 0, mappedBytes = 0;  // live blocks in mappings of their own (`hblks`, `hblkhd`)
};
PoolHeld poolHeld();
// Decay's turn from a malloc() the C library serves, and from decay's thread (decay_thread.h), with what it
// found (Pool::decayTick): a program whose large blocks are all freed and that goes on with small ones, or
// goes quiet, gets the pool's memory back once it is idle, as glibc unmaps or trims it (without this, at the
// pool's next call, which may never come). Nothing (DecayWatch::Nothing) before the pool is made, and (Busy)
// inside it; never waits for the pool's lock. errno is left as it was.
DecayWatch poolDecayTick();
// The program's only thread is about to sleep for `ns` (sleep_calls.cc): what decay would give back meanwhile
// goes back now, where the sleep outlasts its period (Pool::quietFor). Nothing before the pool is made, inside
// it, or where the lock is held; never waits. errno is left as it was.
void poolQuietFor(uint64_t ns);
// How long the program's only thread must be quiet for poolQuietFor() to give back at least `worthBytes`, in
// nanoseconds (Pool::quietPeriodNs); 0 where less would go back, before the pool is made, inside it, or where
// the lock is held. Never waits; errno is left as it was.
uint64_t poolQuietPeriodNs(uint64_t worthBytes);
// Memory beside the pool grew by `bytes` (the C library's heap: c_heap.h): the pool's free spans give back as
// much now (Pool::tryPurgeSpansFor). False, nothing done, on a thread inside the pool (it may hold the lock) or
// where another thread holds the lock: the caller asks again later. True otherwise, the pool made or not (not
// made: nothing is free). errno is left as it was.
bool poolPurgeSpansFor(uint64_t bytes);

// After the program lowered its RLIMIT_AS (address_limit.cc): the pool's spare reservation shrunk to fit
// what the limit leaves (Pool::fitAddressSpace). A pool not made yet reserves within the limit when it is.
void fitPoolToAddressSpace();
// After a request failed under an RLIMIT_AS: the pool's whole spare reservation given back (it grows no
// further; what it cannot serve then goes to the OS, a mapping each). Whether any was, so that the request
// is worth making again; false without a limit, inside the pool (its lock may be held), or with none left.
bool poolGaveBackSpare();

}  // namespace tp::preload

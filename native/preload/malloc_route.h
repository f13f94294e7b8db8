// The malloc family's routing, for overrides.cc, which exports it (as mimalloc's alloc-override.c exports
// its allocator): a request of at least TENSORPOOL_MIN_BYTES, with an alignment of at most 64, goes to the
// process pool; everything else, and everything before the pool is ready or while a thread is inside it, goes
// to the next allocator in the chain (next_allocator.h: glibc's malloc, or libc_malloc_debug.so, jemalloc,
// mimalloc preloaded after this library), which also frees, resizes and measures every block it made: none of
// its blocks reaches another allocator. free, realloc and malloc_usable_size tell the pool's blocks apart by
// address (ownedByPool: a lock-free table). Inline: each entry's whole path is the exported function's own,
// as it was when the entries were defined here (malloc's path below the threshold is a compare and a jump).
// Included by overrides.cc only: its functions and variables are that file's own (internal linkage).
#pragma once

#include <errno.h>
#include <malloc.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <atomic>

#include "always_run.h"
#include "c_heap.h"
#include "core/header.h"
#include "next_allocator.h"
#include "next_symbol.h"
#include "process_pool.h"

// An entry of the malloc family: inlined into overrides.cc's exported function, and with it in the code every
// program runs (always_run.h).
#define TP_ROUTE static inline __attribute__((always_inline))

namespace tp::preload::route {

static TP_ALWAYS_RUN bool isPowerOfTwo(size_t x) { return x != 0 && (x & (x - 1)) == 0; }

// Aligned blocks of glibc's malloc below the threshold (PyTorch's posix_memalign(64) of every small
// tensor): glibc's memalign bypasses its thread cache and splits a larger chunk each time, several times the
// cost of a malloc. Up to 64 bytes of alignment
// they come from malloc instead, over-allocated by alignment - 16 (malloc's own alignment), and a block
// that malloc did not return aligned starts further on (by 16, 32 or 48 bytes), the word before it holding
// kShiftTag | the shift. That word is the chunk's size in glibc's layout, whose top 16 bits a real chunk
// never has set (sizes < 2^48), so free() tells a shifted block from a chunk of glibc's by reading it. Only
// where the next allocator is glibc's malloc: before another allocator's block that word may be another
// block's bytes, or unmapped; its own memalign serves then.
constexpr uint64_t kShiftTag = uint64_t{0xF5A1} << 48;
constexpr uint64_t kTagMask = uint64_t{0xFFFF} << 48;
// detail::anyShifted: whether any block was shifted yet: until then free() need not read the word before a
// block, and goes straight to the next allocator. (A block reaches another thread through the program's own
// synchronisation, which carries this store with it.)
using detail::anyShifted;

// Another allocator's memalign is asked for one byte at least: jemalloc's memalign(a, 0) returns a block
// aligned to 8 only (its posix_memalign and aligned_alloc, which programs call, are right).
// The library's own aligned blocks (its pool's span headers, made inside it) are not shifted either: they are
// few, and a process whose blocks none are shifted frees through the shorter path (freeOutsidePool).
static TP_ALWAYS_RUN void* nextAligned(size_t bytes, size_t alignment) {
  if (!nextIsGlibcMalloc() || detail::insideDepth != 0) return next.memalign.load(std::memory_order_relaxed)(alignment, bytes ? bytes : 1);
  if (alignment > tp::kBlockAlign) return next.memalign.load(std::memory_order_relaxed)(alignment, bytes);
  size_t padded;
  if (__builtin_add_overflow(bytes, alignment - 16, &padded)) {
    errno = ENOMEM;
    return nullptr;
  }
  char* p = static_cast<char*>(next.malloc.load(std::memory_order_relaxed)(padded));
  if (!p) return nullptr;
  const uintptr_t shift = (alignment - reinterpret_cast<uintptr_t>(p) % alignment) % alignment;  // 0, or 16..alignment-16
  if (shift == 0) return p;
  char* q = p + shift;
  reinterpret_cast<uint64_t*>(q)[-1] = kShiftTag | shift;
  if (!anyShifted.load(std::memory_order_relaxed)) {
    anyShifted.store(true, std::memory_order_seq_cst);  // before freeNeedsChecks() reads it (process_pool.cc)
    freeLooksForShifts();
  }
  return q;
}

// The start of the next allocator's block q (not the pool's), and its shift. Only a block aligned to 32
// can be a shifted one: any other pointer (free(p + 1)) goes to the next allocator as it is, without reading
// the word before it, and glibc aborts on it as it would without us ("free(): invalid pointer").
static TP_ALWAYS_RUN char* nextStart(void* q, uintptr_t* shift) {
  *shift = 0;
  if (!anyShifted.load(std::memory_order_relaxed) || reinterpret_cast<uintptr_t>(q) % 32 != 0) return static_cast<char*>(q);
  const uint64_t word = static_cast<uint64_t*>(q)[-1];
  const uint64_t by = word & ~kTagMask;
  if ((word & kTagMask) == kShiftTag && (by == 16 || by == 32 || by == 48)) *shift = static_cast<uintptr_t>(by);
  return static_cast<char*>(q) - *shift;
}

static TP_ALWAYS_RUN void nextFree(void* q) {
  if (!anyShifted.load(std::memory_order_relaxed)) return next.free.load(std::memory_order_relaxed)(q);
  if (!q) return;
  uintptr_t shift;
  next.free.load(std::memory_order_relaxed)(nextStart(q, &shift));
}

// Bytes usable in a block that is not the pool's (the bootstrap's, or the next allocator's).
static TP_ALWAYS_RUN size_t nextUsable(void* q) {
  if (!q) return 0;
  if (bootstrapOwns(q)) return bootstrapSize(q);
  uintptr_t shift;
  return next.usableSize.load(std::memory_order_relaxed)(nextStart(q, &shift)) - shift;
}

// allocate()'s alignment for malloc and realloc: whatever the next allocator's malloc gives (the pool's
// blocks are aligned to more).
constexpr size_t kAsMalloc = 0;

// A block for a request the pool may serve, or the next allocator's when it may not (or the pool has none).
// Out of line: malloc's own path, below the threshold, is a compare and a jump to the next allocator.
// Its malloc aligns every block to 16 only where it is glibc's: jemalloc, tcmalloc and mimalloc align one of
// 8 bytes or less to 8 (posix_memalign(&p, 16, 1) came back 8-aligned), so an aligned request goes to its
// memalign unless malloc's alignment is what it asked for.
static TP_ALWAYS_RUN __attribute__((noinline)) void* allocate(size_t bytes, size_t alignment) {
  if (alignment <= tp::kBlockAlign && routesToPool(bytes)) {
    if (void* p = poolAlloc(bytes)) return p;
  }
  const bool mallocAligns = alignment <= 8 || (alignment <= 16 && nextIsGlibcMalloc());
  return mallocAligns ? next.malloc.load(std::memory_order_relaxed)(bytes) : nextAligned(bytes, alignment);
}

// realloc's move of `old` into `fresh`, a block of `bytes`: its data copied, `old` given back.
static TP_ALWAYS_RUN void* moveInto(void* fresh, void* old, size_t oldBytes, size_t bytes) {
  memcpy(fresh, old, oldBytes < bytes ? oldBytes : bytes);
  if (ownedByPool(old)) poolFreeMoved(old); else nextFree(old);
  return fresh;
}

// realloc to another home (pool to next allocator, or either to the other side of the threshold, or out of
// the bootstrap buffer).
static TP_ALWAYS_RUN void* moveBlock(void* old, size_t oldBytes, size_t bytes) {
  void* fresh = allocate(bytes, kAsMalloc);
  if (!fresh) return nullptr;  // errno set; the old block stays valid, as realloc promises
  return moveInto(fresh, old, oldBytes, bytes);
}

// request(), or where it failed (null) and the pool gave back address space an RLIMIT_AS left it no room
// for (its spare reservation and the free spans at its arena's end: Pool::giveBackAddressSpace), request()
// again: the program gets all the address space glibc would give it. Once at most: a second failure finds
// nothing left to give.
template <typename Request>
static TP_ALWAYS_RUN void* orAgain(Request request) {
  void* p = request();
  if (__builtin_expect(p != nullptr, 1)) return p;
  return poolGaveBackSpare() ? request() : nullptr;
}


// Mallocs and callocs the C library serves on a thread between two turns of the pool's (mallocTick), once it decays.
constexpr unsigned kMallocsPerTick = 256;
static thread_local unsigned mallocsUntilTick __attribute__((tls_model("initial-exec"))) = kMallocsPerTick;

// The pool's turn from the C library's side, every kMallocsPerTick mallocs: decay's (poolDecayTick), so that
// a program whose large blocks are all freed and that goes on with small ones only gets the pool's memory back
// once it is idle, as glibc unmaps or trims it (without this, at the pool's next call, which may never come);
// and glibc's heap held against the pool's free memory (cHeapTick: its heap grows by at most this many blocks
// between two looks). On mallocs rather than frees: a program that frees goes on allocating, and one that only
// allocates after freeing its large blocks would never give the pool a turn on frees.
static TP_ALWAYS_RUN __attribute__((noinline, cold)) void mallocTick() {
  mallocsUntilTick = kMallocsPerTick;
  const DecayWatch found = poolDecayTick();
  cHeapTick();
  // Nothing left to give back: no turns until the pool's next release (mallocBelow is then the C library's).
  if (found == DecayWatch::Live || found == DecayWatch::Nothing || found == DecayWatch::Off) poolTicksOff();
}

// A request the C library serves, counted towards the pool's next turn where the pool ticks (kPoolTicks in
// `extras`, what detail::mallocExtras held).
static TP_ALWAYS_RUN void countTowardsTick(uint8_t extras) {
  if (__builtin_expect(extras & detail::kPoolTicks, 1) && __builtin_expect(--mallocsUntilTick == 0, 0)) mallocTick();
}

// malloc beyond its one compare: a request for the pool, or one below the threshold with extras to do.
TP_ROUTE void* mallocSlow(size_t bytes) {
  if (__builtin_expect(!mayRouteToPool(bytes), 1)) {
    const uint8_t extras = detail::mallocExtras.load(std::memory_order_relaxed);
    // With the pool, the C library's malloc, and now and then the pool's turn; with a limit, a failure may be
    // undone (orAgain).
    if (extras == 0) return next.malloc.load(std::memory_order_relaxed)(bytes);
    countTowardsTick(extras);
    if (__builtin_expect(!(extras & detail::kAddressLimited), 1)) return next.malloc.load(std::memory_order_relaxed)(bytes);
    return orAgain([bytes] { return next.malloc.load(std::memory_order_relaxed)(bytes); });
  }
  return orAgain([bytes] { return allocate(bytes, kAsMalloc); });
}

// mallocCounted's turn: the pool's (mallocTick), then the C library's malloc. Out of line: mallocCounted's
// own path is a countdown and a jump.
static TP_ALWAYS_RUN __attribute__((noinline, cold)) void* mallocTickThen(size_t bytes) {
  mallocTick();
  return next.malloc.load(std::memory_order_relaxed)(bytes);
}

// Below the threshold while the pool ticks (detail::mallocBelow): this thread's countdown, and the C library's
// malloc; every kMallocsPerTick-th call the pool's turn first.
TP_ROUTE void* mallocCounted(size_t bytes) {
  if (__builtin_expect(--mallocsUntilTick == 0, 0)) return mallocTickThen(bytes);
  return next.malloc.load(std::memory_order_relaxed)(bytes);
}

// Below fastBelow (the threshold, unless a limit's retry may be needed), mallocBelow: the C library's malloc,
// or mallocCounted while the pool ticks. A compare and a jump.
TP_ROUTE void* malloc(size_t bytes) {
  if (__builtin_expect(bytes < detail::fastBelow.load(std::memory_order_relaxed), 1)) return detail::mallocBelow.load(std::memory_order_relaxed)(bytes);
  return mallocSlow(bytes);
}

// The library's own C++ runtime (libstdc++, linked in statically) allocates through this (-Wl,--wrap=malloc
// in the preload library's link flags), as the library's own: never from the pool. Its exception pool (71 KiB,
// above the threshold) is allocated as the library loads, after the pool's set-up, and made the pool in every
// process.
TP_ROUTE void* libraryMalloc(size_t bytes) {
  InternalScope inside;
  return malloc(bytes);
}

TP_ROUTE void free(void* p) {
  // No pool made (no mapping tracked): the C library's free, at the cost it had before the pool.
  if (__builtin_expect(!poolMapsAny(), 1)) return nextFree(p);
  if (ownedByPool(p)) return poolFree(p);
  nextFree(p);
}

// free() once a pointer may need a look: a pointer no tracked granule lies near (the folded table's entry is
// zero: every block the next allocator made, but those in a granule that shares its entry with the pool's
// memory) goes to the next allocator's free with a tail call; only the others are looked up in the table.
// kShifted: after a look for a shifted block (nextFree), once there may be any.
template <bool kShifted>
TP_ROUTE void freeOutsidePool(void* p) {
  if (__builtin_expect(os::mayBeTrackedMapping(p), 0)) return freeWithChecks(p);
  if constexpr (kShifted) return nextFree(p);
  return next.free.load(std::memory_order_relaxed)(p);
}

// calloc's block from the pool, zeroed where it may hold what a previous owner wrote, or nullptr. A block
// the pool says reads as zero (a fresh mapping, or an arena block never written since it was carved or given
// back to the OS: calloc(1 GiB) writes nothing and faults nothing in, as glibc's) is not written.
static TP_ALWAYS_RUN void* zeroedPoolBlock(size_t bytes) {
  bool zero = false;
  void* p = poolAlloc(bytes, &zero);
  return p && !zero ? memset(p, 0, bytes) : p;
}

static TP_ALWAYS_RUN void* callocOnce(size_t count, size_t size, size_t bytes) {
  if (routesToPool(bytes)) {
    if (void* p = zeroedPoolBlock(bytes)) return p;
  }
  countTowardsTick(detail::mallocExtras.load(std::memory_order_relaxed));
  return next.calloc.load(std::memory_order_relaxed)(count, size);
}

TP_ROUTE void* calloc(size_t count, size_t size) {
  size_t bytes;
  if (__builtin_mul_overflow(count, size, &bytes)) {
    errno = ENOMEM;
    return nullptr;
  }
  return orAgain([=] { return callocOnce(count, size, bytes); });
}

static TP_ALWAYS_RUN void* reallocOnce(void* p, size_t bytes) {
  if (!p) return malloc(bytes);
  if (ownedByPool(p)) {
    if (bytes == 0) {  // as glibc: realloc(p, 0) frees p
      poolFree(p);
      return nullptr;
    }
    if (routesToPool(bytes)) {
      // In place where the block's capacity holds it: a buffer grown piece by piece is not moved, copied
      // and faulted in again at every piece.
      if (poolResizeInPlace(p, bytes)) return p;
      // A block the OS mapped is resized by the OS, as glibc's mapped chunks are: never two copies at once.
      if (void* moved = poolResizeMapped(p, bytes)) return moved;
    }
    const size_t oldBytes = poolUsableSize(p);
    // A block growing large moves once into a mapping of its own, which the OS resizes from then on.
    if (bytes > oldBytes && routesToPool(bytes)) {
      if (void* fresh = poolAllocMoved(bytes)) return moveInto(fresh, p, oldBytes, bytes);
    }
    return moveBlock(p, oldBytes, bytes);
  }
  uintptr_t shift;
  nextStart(p, &shift);
  const bool bootstrap = bootstrapOwns(p);
  if ((shift != 0 || bootstrap) && bytes == 0) {
    nextFree(p);
    return nullptr;
  }
  // A shifted block moves even where it could grow in place: glibc's realloc knows only its chunk.
  if (routesToPool(bytes) || shift != 0 || bootstrap) return moveBlock(p, nextUsable(p), bytes);
  return next.realloc.load(std::memory_order_relaxed)(p, bytes);
}

TP_ROUTE void* realloc(void* p, size_t bytes) {
  if (bytes == 0) return reallocOnce(p, 0);  // frees p and returns NULL: no failure
  return orAgain([=] { return reallocOnce(p, bytes); });
}

TP_ROUTE void* reallocarray(void* p, size_t count, size_t size) {
  size_t bytes;
  if (__builtin_mul_overflow(count, size, &bytes)) {
    errno = ENOMEM;
    return nullptr;
  }
  return realloc(p, bytes);
}

TP_ROUTE int posixMemalign(void** out, size_t alignment, size_t bytes) {
  if (!isPowerOfTwo(alignment) || alignment % sizeof(void*) != 0) return EINVAL;
  void* p = orAgain([=] { return allocate(bytes, alignment); });
  if (!p) return errno = ENOMEM;  // and errno too, as glibc's (its tst-malloc-thread-fail checks it)
  *out = p;
  return 0;
}

TP_ROUTE void* alignedAlloc(size_t alignment, size_t bytes) {
  // An alignment that is no power of two gets the C library's own answer, which depends on its version
  // (glibc 2.36 serves it rounded up, as memalign; 2.38 refuses it with EINVAL).
  if (!isPowerOfTwo(alignment)) {
    return orAgain([=] { return next.alignedAlloc.load(std::memory_order_relaxed)(alignment, bytes); });
  }
  return orAgain([=] { return allocate(bytes, alignment); });
}

TP_ROUTE void* memalign(size_t alignment, size_t bytes) {
  // glibc rounds an alignment that is no power of two up to the next one; so does this up to 64 (beyond
  // it, the next allocator's own memalign serves and rounds).
  if (alignment > 16 && alignment < tp::kBlockAlign && !isPowerOfTwo(alignment)) alignment = alignment <= 32 ? 32 : 64;
  return orAgain([=] { return allocate(bytes, alignment); });
}

// Page alignment is more than pool blocks promise: the next allocator serves these.
TP_ROUTE void* valloc(size_t bytes) {
  return orAgain([bytes] { return next.valloc.load(std::memory_order_relaxed)(bytes); });
}
TP_ROUTE void* pvalloc(size_t bytes) {
  return orAgain([bytes] { return next.pvalloc.load(std::memory_order_relaxed)(bytes); });
}

// glibc's contract: 1 when memory was given back to the OS, else 0. The next allocator trims its own heap
// (glibc's: `pad` bytes kept at the top), and the pool gives back the pages of all its free blocks and spans
// (what decay would give back once they sat idle, all of it now).
TP_ROUTE int trim(size_t pad) {
  const int nextGaveBack = next.trim.load(std::memory_order_relaxed)(pad);
  const bool poolGaveBack = madePool() && poolTrim() != 0;
  return nextGaveBack || poolGaveBack ? 1 : 0;
}

// The next allocator's figures with the pool's added: a program that watches its heap with mallinfo2 (or a
// test of glibc's that checks its blocks are counted) sees the blocks the pool serves, the arena's as glibc
// counts its heap, the ones in mappings of their own as its mapped chunks. The pool's free memory is counted
// in neither `fordblks` nor `keepcost`: those are what glibc itself could trim.
TP_ROUTE struct mallinfo2 mallinfo2() {
  using Mallinfo2Fn = struct mallinfo2 (*)(void);
  static std::atomic<Mallinfo2Fn> nextMallinfo2{nullptr};
  const Mallinfo2Fn fn = nextSymbolOnce(nextMallinfo2, "mallinfo2");
  struct mallinfo2 info{};
  if (fn) info = fn();
  const PoolHeld held = poolHeld();
  info.arena += held.carved;
  info.uordblks += held.arenaLive;
  info.hblks += held.mappedBlocks;
  info.hblkhd += held.mappedBytes;
  return info;
}

// As glibc's: mallinfo2's figures in ints (each truncated as glibc's are).
TP_ROUTE struct mallinfo mallinfo() {
  const struct mallinfo2 wide = route::mallinfo2();
  struct mallinfo info;
  info.arena = static_cast<int>(wide.arena);
  info.ordblks = static_cast<int>(wide.ordblks);
  info.smblks = static_cast<int>(wide.smblks);
  info.hblks = static_cast<int>(wide.hblks);
  info.hblkhd = static_cast<int>(wide.hblkhd);
  info.usmblks = static_cast<int>(wide.usmblks);
  info.fsmblks = static_cast<int>(wide.fsmblks);
  info.uordblks = static_cast<int>(wide.uordblks);
  info.fordblks = static_cast<int>(wide.fordblks);
  info.keepcost = static_cast<int>(wide.keepcost);
  return info;
}

TP_ROUTE size_t usableSize(void* p) {
  if (!p) return 0;
  return ownedByPool(p) ? poolUsableSize(p) : nextUsable(p);
}

}  // namespace tp::preload::route

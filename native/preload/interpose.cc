// The malloc family, interposed (as mimalloc's alloc-override.c does for a whole allocator): a request
// of at least TENSORPOOL_MIN_BYTES, with an alignment of at most 64, goes to the process pool; everything
// else, and everything before the pool is ready or while a thread is inside it, goes to the C library's
// own entry points (__libc_malloc & co., exported by glibc, so no dlsym runs on the allocation path).
// free, realloc and malloc_usable_size tell the two apart by address (ownedByPool: a lock-free bitmap).
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <atomic>

#include "core/header.h"
#include "process_pool.h"

extern "C" {
void* __libc_malloc(size_t);
void __libc_free(void*);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
void* __libc_valloc(size_t);
void* __libc_pvalloc(size_t);
}

namespace {

using namespace tp::preload;

// glibc's malloc_usable_size has no __libc_ alias: found once, from inside the pool's scope (dlsym may
// allocate), the first time a C-library block is asked about. In the C library itself, not RTLD_NEXT: the
// blocks below the threshold are __libc_malloc's, and an allocator preloaded after this library (jemalloc)
// would answer for blocks it never made (SIGSEGV; glibc's tst-malloc-usable).
size_t libcUsableSize(void* p) {
  using Fn = size_t (*)(void*);
  static Fn real = [] {
    InternalScope inside;
    void* libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
    Fn found = libc ? reinterpret_cast<Fn>(dlsym(libc, "malloc_usable_size")) : nullptr;
    if (libc) dlclose(libc);
    return found;
  }();
  return real ? real(p) : 0;
}

bool isPowerOfTwo(size_t x) { return x != 0 && (x & (x - 1)) == 0; }

// Aligned blocks of the C library below the threshold (PyTorch's posix_memalign(64) of every small
// tensor): glibc's memalign bypasses its thread cache and splits a larger chunk each time (the GRU trace
// replayed through the library: 125 ns per allocation against tcmalloc's 54). Up to 64 bytes of alignment
// they come from malloc instead, over-allocated by alignment - 16 (malloc's own alignment), and a block
// that malloc did not return aligned starts further on (by 16, 32 or 48 bytes), the word before it holding
// kShiftTag | the shift. That word is the chunk's size in glibc's layout, whose top 16 bits a real chunk
// never has set (sizes < 2^48), so free() tells a shifted block from a chunk of glibc's by reading it.
constexpr uint64_t kShiftTag = uint64_t{0xF5A1} << 48;
constexpr uint64_t kTagMask = uint64_t{0xFFFF} << 48;
// Whether any block was shifted yet: until then free() need not read the word before a block. (A block
// reaches another thread through the program's own synchronisation, which carries this store with it.)
std::atomic<bool> anyShifted{false};

void* libcAligned(size_t bytes, size_t alignment) {
  if (alignment > tp::kBlockAlign) return __libc_memalign(alignment, bytes);
  size_t padded;
  if (__builtin_add_overflow(bytes, alignment - 16, &padded)) {
    errno = ENOMEM;
    return nullptr;
  }
  char* p = static_cast<char*>(__libc_malloc(padded));
  if (!p) return nullptr;
  const uintptr_t shift = (alignment - reinterpret_cast<uintptr_t>(p) % alignment) % alignment;  // 0, or 16..alignment-16
  if (shift == 0) return p;
  char* q = p + shift;
  reinterpret_cast<uint64_t*>(q)[-1] = kShiftTag | shift;
  if (!anyShifted.load(std::memory_order_relaxed)) anyShifted.store(true, std::memory_order_relaxed);
  return q;
}

// The start of the C library's chunk of block q (not the pool's), and its shift. Only a block aligned to 32
// can be a shifted one: any other pointer (free(p + 1)) goes to glibc as it is, without reading the word
// before it, and glibc aborts on it as it would without us ("free(): invalid pointer").
char* libcStart(void* q, uintptr_t* shift) {
  *shift = 0;
  if (reinterpret_cast<uintptr_t>(q) % 32 != 0) return static_cast<char*>(q);
  const uint64_t word = static_cast<uint64_t*>(q)[-1];
  const uint64_t by = word & ~kTagMask;
  if ((word & kTagMask) == kShiftTag && (by == 16 || by == 32 || by == 48)) *shift = static_cast<uintptr_t>(by);
  return static_cast<char*>(q) - *shift;
}

void libcFree(void* q) {
  if (!anyShifted.load(std::memory_order_relaxed)) return __libc_free(q);
  if (!q) return;
  uintptr_t shift;
  __libc_free(libcStart(q, &shift));
}

size_t libcUsable(void* q) {
  if (!q) return 0;
  uintptr_t shift;
  return libcUsableSize(libcStart(q, &shift)) - shift;
}

// A block for a request the pool may serve, or the C library's when it may not (or the pool has none).
// Out of line: malloc's own path, below the threshold, is a compare and a jump to the C library's.
__attribute__((noinline)) void* allocate(size_t bytes, size_t alignment) {
  if (alignment <= tp::kBlockAlign && routesToPool(bytes)) {
    if (void* p = poolAlloc(bytes)) return p;
  }
  return alignment <= 16 ? __libc_malloc(bytes) : libcAligned(bytes, alignment);
}

// realloc to another home (pool to C library, or either to the other side of the threshold).
void* moveBlock(void* old, size_t oldBytes, size_t bytes) {
  void* fresh = allocate(bytes, 16);
  if (!fresh) return nullptr;  // errno set; the old block stays valid, as realloc promises
  memcpy(fresh, old, oldBytes < bytes ? oldBytes : bytes);
  if (ownedByPool(old)) poolFreeMoved(old); else libcFree(old);
  return fresh;
}

}  // namespace

#define TP_EXPORT extern "C" __attribute__((visibility("default")))

TP_EXPORT void* malloc(size_t bytes) {
  if (__builtin_expect(!mayRouteToPool(bytes), 1)) return __libc_malloc(bytes);
  return allocate(bytes, 16);
}

// The library's own C++ runtime (libstdc++, linked in statically) allocates through this (-Wl,--wrap=malloc
// in the preload library's link flags), as the library's own: never from the pool. Its exception pool (71 KiB,
// above the threshold) is allocated as the library loads, after the pool's set-up, and made the pool in every
// process.
extern "C" void* __wrap_malloc(size_t bytes) {
  InternalScope inside;
  return malloc(bytes);
}

TP_EXPORT void free(void* p) {
  if (__builtin_expect(ownedByPool(p), 0)) return poolFree(p);
  libcFree(p);
}

// calloc's block from the pool, zeroed where it may hold what a previous owner wrote, or nullptr. A block
// the pool says reads as zero (a fresh mapping, or an arena block never written since it was carved or given
// back to the OS: calloc(1 GiB) writes nothing and faults nothing in, as glibc's) is not written.
static void* zeroedPoolBlock(size_t bytes) {
  bool zero = false;
  void* p = poolAlloc(bytes, &zero);
  return p && !zero ? memset(p, 0, bytes) : p;
}

TP_EXPORT void* calloc(size_t count, size_t size) {
  size_t bytes;
  if (__builtin_mul_overflow(count, size, &bytes)) {
    errno = ENOMEM;
    return nullptr;
  }
  if (routesToPool(bytes)) {
    if (void* p = zeroedPoolBlock(bytes)) return p;
  }
  return __libc_calloc(count, size);
}

TP_EXPORT void* realloc(void* p, size_t bytes) {
  if (!p) return malloc(bytes);
  if (ownedByPool(p)) {
    if (bytes == 0) {  // as glibc: realloc(p, 0) frees p
      poolFree(p);
      return nullptr;
    }
    // In place where the block's capacity holds it (a buffer grown piece by piece moved, copied and
    // gave its pages back at every piece: 200x glibc's time).
    if (routesToPool(bytes) && poolResizeInPlace(p, bytes)) return p;
    // A block the OS mapped is resized by the OS, as glibc's mapped chunks are: never two copies at once.
    if (routesToPool(bytes)) {
      if (void* moved = poolResizeMapped(p, bytes)) return moved;
    }
    return moveBlock(p, poolUsableSize(p), bytes);
  }
  uintptr_t shift;
  libcStart(p, &shift);
  if (shift != 0 && bytes == 0) {
    libcFree(p);
    return nullptr;
  }
  // A shifted block moves even where it could grow in place: glibc's realloc knows only its chunk.
  if (routesToPool(bytes) || shift != 0) return moveBlock(p, libcUsable(p), bytes);
  return __libc_realloc(p, bytes);
}

TP_EXPORT void* reallocarray(void* p, size_t count, size_t size) {
  size_t bytes;
  if (__builtin_mul_overflow(count, size, &bytes)) {
    errno = ENOMEM;
    return nullptr;
  }
  return realloc(p, bytes);
}

TP_EXPORT int posix_memalign(void** out, size_t alignment, size_t bytes) {
  if (!isPowerOfTwo(alignment) || alignment % sizeof(void*) != 0) return EINVAL;
  void* p = allocate(bytes, alignment);
  if (!p) return errno = ENOMEM;  // and errno too, as glibc's (its tst-malloc-thread-fail checks it)
  *out = p;
  return 0;
}

TP_EXPORT void* aligned_alloc(size_t alignment, size_t bytes) {
  if (!isPowerOfTwo(alignment)) {
    errno = EINVAL;
    return nullptr;
  }
  return allocate(bytes, alignment);
}

TP_EXPORT void* memalign(size_t alignment, size_t bytes) {
  // glibc rounds an alignment that is no power of two up to the next one; so does this up to 64 (beyond
  // it, glibc's own memalign serves and rounds).
  if (alignment > 16 && alignment < tp::kBlockAlign && !isPowerOfTwo(alignment)) alignment = alignment <= 32 ? 32 : 64;
  return allocate(bytes, alignment);
}

// Page alignment is more than pool blocks promise: the C library serves these.
TP_EXPORT void* valloc(size_t bytes) { return __libc_valloc(bytes); }
TP_EXPORT void* pvalloc(size_t bytes) { return __libc_pvalloc(bytes); }

TP_EXPORT size_t malloc_usable_size(void* p) {
  if (!p) return 0;
  return ownedByPool(p) ? poolUsableSize(p) : libcUsable(p);
}

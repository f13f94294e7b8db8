// The allocator next in the chain: whatever the process would use without this library (glibc's malloc,
// libc_malloc_debug.so, a jemalloc or mimalloc preloaded after it), found with dlsym(RTLD_NEXT, ...). It
// serves everything the pool does not, and frees, resizes and measures only blocks it made itself.
//
// Each entry starts as a bootstrap function: the first call finds the real ones (every entry at once). dlsym
// may allocate while it looks (glibc's before 2.34 did, with calloc); what this thread asks meanwhile is
// served from a static buffer, whose blocks stay there for good: freeing one does nothing, realloc copies it
// out, and none ever reaches the next allocator (bootstrapOwns).
#pragma once

#include <atomic>
#include <cstddef>

namespace tp::preload {

struct NextAllocator {
  std::atomic<void* (*)(size_t)> malloc;
  std::atomic<void (*)(void*)> free;
  std::atomic<void* (*)(size_t, size_t)> calloc;
  std::atomic<void* (*)(void*, size_t)> realloc;
  std::atomic<void* (*)(size_t, size_t)> memalign;  // (alignment, bytes)
  // (alignment, bytes): only for an alignment that is no power of two, which the C library's versions
  // answer differently (glibc 2.36 rounds it up as memalign does, 2.38 refuses it with EINVAL).
  std::atomic<void* (*)(size_t, size_t)> alignedAlloc;
  std::atomic<void* (*)(size_t)> valloc;
  std::atomic<void* (*)(size_t)> pvalloc;
  std::atomic<size_t (*)(void*)> usableSize;
  std::atomic<int (*)(size_t)> trim;  // malloc_trim (an allocator without one: a function that gives nothing back)
};
__attribute__((visibility("hidden"))) extern NextAllocator next;  // hidden: read directly on the hot path

// Finds the next allocator's entries, once (later calls return at once), and lets it set itself up (a
// first allocation: jemalloc registers its fork handlers then, before the pool's, see fork.cc).
void resolveNextAllocator();

// Whether the next allocator is glibc's own malloc, whose chunk layout malloc_route.h's shifted blocks rely
// on. False until resolved.
bool nextIsGlibcMalloc();

// Whether p lies in the bootstrap buffer (any p; never dereferenced).
bool bootstrapOwns(const void* p);
// The bytes asked for the bootstrap block at p. Pre: bootstrapOwns(p), p returned by the bootstrap.
size_t bootstrapSize(const void* p);

}  // namespace tp::preload

#include "next_allocator.h"

#include <dlfcn.h>
#include <link.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "always_run.h"

// glibc's own entry points (exported by libc.so.6): what an entry RTLD_NEXT does not find falls back to.
extern "C" {
void* __libc_malloc(size_t);
void __libc_free(void*);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
void* __libc_valloc(size_t);
void* __libc_pvalloc(size_t);
}

namespace tp::preload {

namespace {

// --- The bootstrap: blocks for what this thread asks while it looks the next allocator up ---------------

constexpr size_t kPage = 4096;
alignas(kPage) unsigned char buffer[64 << 10];  // zero, and never reused: calloc needs to write nothing
std::atomic<size_t> bufferUsed{0};

void bootstrapAwareFree(void* p);

// A block of `bytes` aligned to `alignment` (at most a page), the bytes asked in the word before it; nullptr
// and ENOMEM once the buffer is full.
TP_ALWAYS_RUN void* bootstrapBlock(size_t bytes, size_t alignment) {
  if (alignment < 16) alignment = 16;
  if (alignment > kPage || bytes > sizeof buffer) {
    errno = ENOMEM;
    return nullptr;
  }
  size_t at = bufferUsed.load(std::memory_order_relaxed), start;
  do {
    start = (at + sizeof(size_t) + alignment - 1) / alignment * alignment;
    if (start + bytes > sizeof buffer) {
      errno = ENOMEM;
      return nullptr;
    }
  } while (!bufferUsed.compare_exchange_weak(at, start + bytes, std::memory_order_relaxed));
  memcpy(buffer + start - sizeof(size_t), &bytes, sizeof bytes);
  // From now on free() looks for bootstrap blocks (before the block is handed out: whoever frees it, later,
  // sees this store through the program's own synchronisation). A store after the resolution's
  // compare-exchange replaces its pointer; one before it makes it fail.
  next.free.store(bootstrapAwareFree, std::memory_order_release);
  return buffer + start;
}

// --- Finding the next allocator ---------------------------------------------------------------------------

// Whether this thread is looking it up now: its allocations meanwhile come from the bootstrap buffer.
thread_local bool resolving __attribute__((tls_model("initial-exec"))) = false;
std::atomic<bool> resolved{false};
std::atomic<bool> glibcMalloc{false};
std::atomic<void (*)(void*)> resolvedFree{nullptr};

// The version of glibc's ABI a program built on this architecture binds the malloc family to.
#if defined(__x86_64__)
constexpr const char* kBaseVersion = "GLIBC_2.2.5";
#elif defined(__aarch64__)
constexpr const char* kBaseVersion = "GLIBC_2.17";
#else
constexpr const char* kBaseVersion = nullptr;
#endif

// The object whose code holds `f` (nullptr when none does): _dl_find_object, lock-free, a search of the loaded
// objects' ranges. Not dladdr1, which walks the object's whole symbol table for the nearest symbol as well
// (jemalloc's: about 45,000 instructions a call, in every process the library starts in beside it).
TP_ALWAYS_RUN const link_map* objectOf(void* f) {
  dl_find_object found;
  return _dl_find_object(f, &found) == 0 ? found.dlfo_link_map : nullptr;
}

// The definition the program's own reference would bind to, after this library's: the first object that
// defines `name` either at the program's version or without versions. dlvsym finds only the former (it
// skips jemalloc's unversioned malloc), dlsym only default versions (it skips libc_malloc_debug.so's, which
// are non-default ones, malloc@GLIBC_2.2.5: glibc's malloc served instead, and MALLOC_CHECK_ did nothing;
// glibc's tst-malloc-usable): where both find one, the earlier in load order (the search order of the
// objects loaded at start) is the one.
TP_ALWAYS_RUN void* lookUpAddress(const char* name, const char* version) {
  void* versioned = version ? dlvsym(RTLD_NEXT, name, version) : nullptr;
  void* plain = dlsym(RTLD_NEXT, name);
  void* found = versioned ? versioned : plain;
  if (versioned && plain && versioned != plain) {
    const link_map* v = objectOf(versioned);
    const link_map* p = objectOf(plain);
    for (const link_map* o = v; o && p; o = o->l_next) {
      if (o == p) break;  // the versioned one loaded first
      if (!o->l_next) found = plain;
    }
  }
  return found;
}

template <typename Fn>
inline Fn lookUp(const char* name, const char* version, Fn fallback) {
  void* found = lookUpAddress(name, version);
  return found ? reinterpret_cast<Fn>(found) : fallback;
}

// Whether `m` is glibc's own malloc: the C library's __libc_malloc, which is malloc under another name, found
// at its version (an unversioned __libc_malloc, mimalloc's or tcmalloc's, is skipped). Not dladdr, which
// walks the C library's symbols linearly in every process the library starts in. Elsewhere than x86-64 and AArch64: no.
TP_ALWAYS_RUN bool isGlibcMalloc(void* m) {
  return kBaseVersion && m == dlvsym(RTLD_NEXT, "__libc_malloc", kBaseVersion);
}

void* bootMalloc(size_t bytes);
void bootFree(void* p);
void* bootCalloc(size_t count, size_t size);
void* bootRealloc(void* p, size_t bytes);
void* bootMemalign(size_t alignment, size_t bytes);
void* bootAlignedAlloc(size_t alignment, size_t bytes);
void* bootValloc(size_t bytes);
void* bootPvalloc(size_t bytes);
size_t bootUsableSize(void* p);
TP_ALWAYS_RUN size_t noUsableSize(void*) { return 0; }
int bootTrim(size_t pad);
TP_ALWAYS_RUN int noTrim(size_t) { return 0; }

// Every thread that finds the entries unresolved looks them up (the same answers), without a lock: none can
// be held across fork() or wait on another thread's dlsym. A thread already looking returns at once.
TP_ALWAYS_RUN void resolve() {
  if (resolved.load(std::memory_order_acquire) || resolving) return;
  resolving = true;
  auto* m = lookUp<void* (*)(size_t)>("malloc", kBaseVersion, __libc_malloc);
  auto* f = lookUp<void (*)(void*)>("free", kBaseVersion, __libc_free);
  auto* c = lookUp<void* (*)(size_t, size_t)>("calloc", kBaseVersion, __libc_calloc);
  auto* r = lookUp<void* (*)(void*, size_t)>("realloc", kBaseVersion, __libc_realloc);
  auto* a = lookUp<void* (*)(size_t, size_t)>("memalign", kBaseVersion, __libc_memalign);
  // Newer than the base version (GLIBC_2.16): the default version, what a program built here binds to.
  auto* aa = lookUp<void* (*)(size_t, size_t)>("aligned_alloc", nullptr, __libc_memalign);
  auto* v = lookUp<void* (*)(size_t)>("valloc", kBaseVersion, __libc_valloc);
  auto* pv = lookUp<void* (*)(size_t)>("pvalloc", kBaseVersion, __libc_pvalloc);
  auto* u = lookUp<size_t (*)(void*)>("malloc_usable_size", kBaseVersion, noUsableSize);
  auto* t = lookUp<int (*)(size_t)>("malloc_trim", kBaseVersion, noTrim);
  resolvedFree.store(f, std::memory_order_release);
  glibcMalloc.store(isGlibcMalloc(reinterpret_cast<void*>(m)), std::memory_order_release);
  next.malloc.store(m, std::memory_order_release);
  next.calloc.store(c, std::memory_order_release);
  next.realloc.store(r, std::memory_order_release);
  next.memalign.store(a, std::memory_order_release);
  next.alignedAlloc.store(aa, std::memory_order_release);
  next.valloc.store(v, std::memory_order_release);
  next.pvalloc.store(pv, std::memory_order_release);
  next.usableSize.store(u, std::memory_order_release);
  next.trim.store(t, std::memory_order_release);
  void (*unresolved)(void*) = bootFree;
  next.free.compare_exchange_strong(unresolved, f, std::memory_order_acq_rel);
  resolved.store(true, std::memory_order_release);
  resolving = false;
}

// Frees p unless the bootstrap made it; for next.free once the bootstrap has served anything.
TP_ALWAYS_RUN void bootstrapAwareFree(void* p) {
  if (bootstrapOwns(p)) return;
  resolve();
  if (auto* f = resolvedFree.load(std::memory_order_acquire)) f(p);
  // (else p came from no allocator this thread could have used yet: nothing to free)
}

// The entries until resolved: each looks the next allocator up and calls its entry; a call from inside the
// lookup (the entry still this one) is served by the bootstrap.
TP_ALWAYS_RUN void* bootMalloc(size_t bytes) {
  resolve();
  auto* f = next.malloc.load(std::memory_order_acquire);
  return f != bootMalloc ? f(bytes) : bootstrapBlock(bytes, 16);
}
TP_ALWAYS_RUN void bootFree(void* p) { bootstrapAwareFree(p); }
TP_ALWAYS_RUN void* bootCalloc(size_t count, size_t size) {
  resolve();
  auto* f = next.calloc.load(std::memory_order_acquire);
  if (f != bootCalloc) return f(count, size);
  size_t bytes;
  if (__builtin_mul_overflow(count, size, &bytes)) {
    errno = ENOMEM;
    return nullptr;
  }
  return bootstrapBlock(bytes, 16);
}
TP_ALWAYS_RUN void* bootRealloc(void* p, size_t bytes) {
  resolve();
  auto* f = next.realloc.load(std::memory_order_acquire);
  if (f != bootRealloc) return f(p, bytes);
  errno = ENOMEM;  // no block of the next allocator exists yet to resize (malloc_route.h moves bootstrap blocks)
  return nullptr;
}
TP_ALWAYS_RUN void* bootMemalign(size_t alignment, size_t bytes) {
  resolve();
  auto* f = next.memalign.load(std::memory_order_acquire);
  return f != bootMemalign ? f(alignment, bytes) : bootstrapBlock(bytes, alignment);
}
TP_ALWAYS_RUN void* bootAlignedAlloc(size_t alignment, size_t bytes) {
  resolve();
  auto* f = next.alignedAlloc.load(std::memory_order_acquire);
  return f != bootAlignedAlloc ? f(alignment, bytes) : bootstrapBlock(bytes, alignment);
}
TP_ALWAYS_RUN void* bootValloc(size_t bytes) {
  resolve();
  auto* f = next.valloc.load(std::memory_order_acquire);
  return f != bootValloc ? f(bytes) : bootstrapBlock(bytes, kPage);
}
TP_ALWAYS_RUN void* bootPvalloc(size_t bytes) {
  resolve();
  auto* f = next.pvalloc.load(std::memory_order_acquire);
  return f != bootPvalloc ? f(bytes) : bootstrapBlock((bytes + kPage - 1) / kPage * kPage, kPage);
}
TP_ALWAYS_RUN size_t bootUsableSize(void* p) {
  resolve();
  auto* f = next.usableSize.load(std::memory_order_acquire);
  return f != bootUsableSize ? f(p) : 0;
}
TP_ALWAYS_RUN int bootTrim(size_t pad) {
  resolve();
  auto* f = next.trim.load(std::memory_order_acquire);
  return f != bootTrim ? f(pad) : 0;  // nothing the bootstrap holds is ever given back
}

}  // namespace

NextAllocator next{{bootMalloc},   {bootFree},         {bootCalloc}, {bootRealloc},   {bootMemalign},
                   {bootAlignedAlloc}, {bootValloc}, {bootPvalloc}, {bootUsableSize}, {bootTrim}};

TP_ALWAYS_RUN void resolveNextAllocator() {
  if (resolved.load(std::memory_order_acquire)) return;
  resolve();
  if (resolving) return;  // called from inside the lookup
  auto* f = next.free.load(std::memory_order_acquire);
  f(next.malloc.load(std::memory_order_acquire)(1));
}

TP_ALWAYS_RUN bool nextIsGlibcMalloc() { return glibcMalloc.load(std::memory_order_acquire); }

TP_ALWAYS_RUN bool bootstrapOwns(const void* p) { return reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(buffer) < sizeof buffer; }

TP_ALWAYS_RUN size_t bootstrapSize(const void* p) {
  size_t bytes;
  memcpy(&bytes, static_cast<const unsigned char*>(p) - sizeof(size_t), sizeof bytes);
  return bytes;
}

}  // namespace tp::preload

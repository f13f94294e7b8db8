// Stress of the preload library (run with it in LD_PRELOAD and TENSORPOOL_TEST_MIN_BYTES=4K, the tests' setting
// for a threshold below the floor, and again with 1, as ctest does):
// 4 threads allocate through every entry point of the malloc family with sizes on both sides of the
// threshold, grow and shrink blocks with realloc across it and past every class, fork in the middle (the child allocates and
// frees too), and check a pattern in every block before freeing it, while the main thread grows the C
// library's main heap (the pool then gives back free spans). Exits non-zero on any failure, and
// when the process pool served nothing (the library was not really in front of the C library).
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include "preload/process_api.h"

namespace {

std::atomic<int> failures{0};

void fail(const char* what, size_t bytes) {
  fprintf(stderr, "stress: %s (%zu bytes)\n", what, bytes);
  failures++;
}

struct Rng {
  uint64_t s;
  uint64_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
  // Log-uniform from 1 B to 1 MiB: as many requests below the 4 KiB threshold as above it.
  size_t size() { return size_t{1} << (next() % 20) | (next() & ((size_t{1} << (next() % 20)) - 1)); }
};

struct Block {
  unsigned char* p = nullptr;
  size_t bytes = 0;
  unsigned char seed = 0;
};

void fill(Block& b) {
  for (size_t i = 0; i < b.bytes; i += 61) b.p[i] = static_cast<unsigned char>(b.seed + i);
  if (b.bytes) b.p[b.bytes - 1] = static_cast<unsigned char>(b.seed + b.bytes - 1);  // the last byte too
}
bool intact(const Block& b, size_t upTo) {
  const size_t end = upTo < b.bytes ? upTo : b.bytes;
  for (size_t i = 0; i < end; i += 61) {
    if (b.p[i] != static_cast<unsigned char>(b.seed + i)) return false;
  }
  return end < b.bytes || end == 0 || b.p[end - 1] == static_cast<unsigned char>(b.seed + end - 1);
}

// One new block through entry point `how`; nullptr on failure.
void* allocateBy(int how, size_t bytes) {
  void* p = nullptr;
  switch (how) {
    case 0: return malloc(bytes);
    case 1: {
      unsigned char* c = static_cast<unsigned char*>(calloc(1, bytes));
      for (size_t i = 0; c && i < bytes; i += 97) {
        if (c[i]) fail("calloc returned memory that is not zero", bytes);
      }
      return c;
    }
    case 2: return posix_memalign(&p, 64, bytes) == 0 ? p : nullptr;
    case 3: return aligned_alloc(32, (bytes + 31) / 32 * 32);
    case 4: return memalign(128, bytes);
    case 5: return valloc(bytes);
    case 6: return realloc(nullptr, bytes);
    case 7: return memalign(48, bytes);  // not a power of two: rounded up to 64, as glibc does
    default: return reallocarray(nullptr, bytes, 1);
  }
}
size_t alignmentOf(int how) { return how == 4 ? 128 : how == 5 ? 4096 : how == 2 || how == 7 ? 64 : how == 3 ? 32 : 16; }

// A buffer past every default class (a mapping of its own) grown by realloc, shrunk and freed while the other
// threads allocate and free: its mapping is resized by the OS, moved to other addresses, its bytes intact.
void growPastEveryClass(Rng& rng) {
  Block b{static_cast<unsigned char*>(malloc(size_t{65} << 20)), size_t{65} << 20, static_cast<unsigned char>(rng.next())};
  if (!b.p) return fail("allocation failed", b.bytes);
  fill(b);
  for (size_t bytes : {size_t{73} << 20, size_t{82} << 20, size_t{66} << 20, size_t{90} << 20}) {
    unsigned char* q = static_cast<unsigned char*>(realloc(b.p, bytes));
    if (!q) return free(b.p), fail("realloc failed", bytes);
    Block moved{q, b.bytes, b.seed};
    if (!intact(moved, b.bytes < bytes ? b.bytes : bytes)) fail("realloc lost the contents", bytes);
    b.p = q;
    b.bytes = bytes;
    fill(b);
  }
  free(b.p);
}

void worker(uint64_t seed, int rounds) {
  Rng rng{seed * 0x9E3779B97F4A7C15ull + 1};
  std::vector<Block> live(64);
  for (int r = 0; r < rounds; ++r) {
    if (r % 10000 == 5000) growPastEveryClass(rng);
    Block& b = live[rng.next() % live.size()];
    if (b.p) {
      if (!intact(b, b.bytes)) fail("a block's pattern changed before it was freed", b.bytes);
      if (malloc_usable_size(b.p) < b.bytes) fail("malloc_usable_size below the request", b.bytes);
      if (rng.next() % 3 == 0) {  // realloc: grow or shrink, often across the threshold
        const size_t bytes = rng.size();
        unsigned char* q = static_cast<unsigned char*>(realloc(b.p, bytes));
        if (!q) { fail("realloc failed", bytes); continue; }
        Block moved{q, b.bytes, b.seed};  // the old block's contents, at the new address
        if (!intact(moved, b.bytes < bytes ? b.bytes : bytes)) fail("realloc lost the contents", bytes);
        b.p = q;
        b.bytes = bytes;
        fill(b);
        continue;
      }
      free(b.p);
      b.p = nullptr;
      continue;
    }
    const int how = static_cast<int>(rng.next() % 9);
    const size_t bytes = rng.size();
    b.p = static_cast<unsigned char*>(allocateBy(how, bytes));
    if (!b.p) { fail("allocation failed", bytes); continue; }
    if (reinterpret_cast<uintptr_t>(b.p) % alignmentOf(how)) fail("misaligned block", bytes);
    b.bytes = bytes;
    b.seed = static_cast<unsigned char>(rng.next());
    fill(b);
  }
  for (Block& b : live) {
    if (b.p && !intact(b, b.bytes)) fail("a block's pattern changed before it was freed", b.bytes);
    free(b.p);
  }
}

// The C library's main heap growing beside the pool while the workers free and allocate (the main thread's
// blocks below the threshold: the workers' come from arenas of their own, which do not move the break): the
// pool gives back as much of its free spans, wherever they start, and every block the workers hold stays as
// it was. Blocks are kept, a little more each time, so that the heap passes its high-water mark again and again.
// (Where the pool serves them too, at a threshold below their sizes, it only waits.)
void growMainHeap(const std::atomic<bool>& done, uint64_t minBytes) {
  constexpr uint64_t kSmallest = 256, kSizes = 3000;  // the kept blocks' sizes: kSmallest + [0, kSizes)
  Rng rng{12345};
  std::vector<Block> kept;
  while (!done.load(std::memory_order_relaxed) && minBytes < kSmallest + kSizes) usleep(1000);
  while (!done.load(std::memory_order_relaxed) && kept.size() < 200000) {
    for (int i = 0; i < 32; ++i) {
      Block b{nullptr, kSmallest + rng.next() % kSizes, static_cast<unsigned char>(rng.next())};
      b.p = static_cast<unsigned char*>(malloc(b.bytes));
      if (!b.p) return fail("allocation failed", b.bytes);
      fill(b);
      kept.push_back(b);
    }
    usleep(300);
  }
  for (Block& b : kept) {
    if (!intact(b, b.bytes)) fail("a block's pattern changed before it was freed", b.bytes);
    free(b.p);
  }
}

}  // namespace

int main() {
  using Api = const tp::preload::ProcessPoolApi* (*)();
  Api find = reinterpret_cast<Api>(dlsym(RTLD_DEFAULT, "tensorpool_process_pool"));
  const tp::preload::ProcessPoolApi* api = find ? find() : nullptr;
  if (!api) {
    fprintf(stderr, "stress: the preload library is not loaded (run with LD_PRELOAD)\n");
    return 2;
  }
  // Failures the family must report, not crash on.
  volatile size_t huge = SIZE_MAX / 2;  // volatile: the compiler would warn of what is tested here
  errno = 0;
  if (malloc(huge) != nullptr || errno != ENOMEM) fail("an impossible malloc did not fail with ENOMEM", 0);
  if (calloc(huge, 4) != nullptr || errno != ENOMEM) fail("an overflowing calloc did not fail with ENOMEM", 0);
  void* p = nullptr;
  if (posix_memalign(&p, 24, 64) != EINVAL) fail("posix_memalign accepted alignment 24", 0);

  tp::PoolStats before{};
  api->stats(&before);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back(worker, t + 1, 100000);
  // Fork while the threads allocate: the child's pool must be usable.
  usleep(20000);
  pid_t child = fork();
  if (child == 0) {
    worker(99, 20000);
    _exit(failures.load() == 0 ? 0 : 1);
  }
  std::atomic<bool> done{false};
  std::thread waiter([&] {
    for (auto& t : threads) t.join();
    done = true;
  });
  growMainHeap(done, api->minBytes);
  waiter.join();
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fail("the forked child failed", 0);
  }
  tp::PoolStats stats{};
  api->stats(&stats);
  if (stats.allocs == 0) fail("the process pool served nothing", 0);
  // Below 4 KiB the C library's own allocations reach the pool too, and it keeps some of them across the
  // threads' lives (the thread-local storage of the stacks it caches for reuse): not ours to count.
  if (api->minBytes >= 4096 && stats.liveBlocks != before.liveBlocks) {
    fail("the process pool holds more blocks after every block was freed", stats.liveBlocks);
  }
  printf("stress: %llu pool allocations (%llu hits, %llu grown, %llu OS), %d failures\n",
         static_cast<unsigned long long>(stats.allocs), static_cast<unsigned long long>(stats.hits),
         static_cast<unsigned long long>(stats.grown), static_cast<unsigned long long>(stats.osFallbacks + stats.osOversize),
         failures.load());
  return failures.load() == 0 ? 0 : 1;
}

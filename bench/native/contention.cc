// Contention of the malloc family from several threads, as a runtime's thread pool allocates: each thread
// keeps 8 blocks live and replaces a random one per step (free + malloc of a size drawn from 64 KiB to 4 MiB,
// one write per block). Prints one line per thread count: threads, wall-clock ns per malloc+free pair of all
// threads together (wall time / all pairs: perfect scaling halves it from 1 to 2 threads on 2 cores). Whose
// malloc it measures is LD_PRELOAD's choice (bench/contention.ts runs each).
//
//   tp_contention [pairs-per-thread] [thread counts...]     (defaults: 200000; 1 2 4)
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <thread>
#include <vector>

namespace {

uint64_t nowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void worker(uint64_t seed, long pairs) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  auto next = [&] {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  };
  // Sizes a tensor runtime asks for: powers of two and in between, 64 KiB .. 4 MiB.
  static const size_t sizes[] = {65536, 98304, 131072, 196608, 262144, 524288, 802816, 1048576, 1605632, 2097152, 3211264, 4194304};
  char* live[8] = {};
  for (long i = 0; i < pairs; ++i) {
    const size_t slot = next() % 8;
    free(live[slot]);
    const size_t bytes = sizes[next() % (sizeof sizes / sizeof sizes[0])];
    live[slot] = static_cast<char*>(malloc(bytes));
    if (!live[slot]) abort();
    live[slot][bytes - 1] = 1;
  }
  for (char* p : live) free(p);
}

}  // namespace

int main(int argc, char** argv) {
  const long pairs = argc > 1 ? atol(argv[1]) : 200000;
  std::vector<int> counts;
  for (int i = 2; i < argc; ++i) counts.push_back(atoi(argv[i]));
  if (counts.empty()) counts = {1, 2, 4};
  worker(0, pairs / 10);  // warm-up: the allocator's caches, or the pool's classes, exist before timing
  for (int threads : counts) {
    const uint64_t start = nowNs();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back(worker, t + 1, pairs);
    for (auto& t : pool) t.join();
    const double ns = static_cast<double>(nowNs() - start) / (static_cast<double>(pairs) * threads);
    printf("%d %.1f\n", threads, ns);
  }
  return 0;
}

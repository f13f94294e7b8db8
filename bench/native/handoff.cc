// Blocks handed across threads, as a server's worker threads hand buffers to each other: each thread
// allocates a size drawn per step (35% from 60 KB to 360 KB, the rest 16 B to 4 KB), writes its first and last
// byte, swaps it into a random slot of a ring shared by all threads, and frees what the slot held (a block
// another thread allocated, as a rule). Whose malloc it measures is LD_PRELOAD's choice (bench/handoff.ts
// times each: wall time and peak RSS of the whole process).
//
//   tp_handoff threads operations        (operations: of all threads together)
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <thread>
#include <vector>

namespace {

constexpr size_t kSlots = 4096;
std::atomic<void*> ring[kSlots];

void worker(unsigned thread, long steps) {
  // A linear congruential generator's upper bits (the lead's contend.c, which this reproduces draw for draw).
  unsigned state = thread * 7919 + 1;
  auto next = [&] {
    state = state * 1103515245u + 12345u;
    return state >> 8;
  };
  for (long i = 0; i < steps; ++i) {
    const unsigned pick = next();
    const size_t bytes = pick % 100 < 35 ? 60000 + next() % 300000 : 16 + next() % 4000;
    char* p = static_cast<char*>(malloc(bytes));
    if (!p) abort();
    p[0] = 1;
    p[bytes - 1] = 2;
    free(ring[next() % kSlots].exchange(p));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || atoi(argv[1]) < 1 || atol(argv[2]) < 1) {
    fprintf(stderr, "usage: tp_handoff threads operations\n");
    return 2;
  }
  const int threads = atoi(argv[1]);
  const long steps = atol(argv[2]) / threads;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker, static_cast<unsigned>(t), steps);
  for (std::thread& t : pool) t.join();
  for (std::atomic<void*>& slot : ring) free(slot.exchange(nullptr));
  return 0;
}

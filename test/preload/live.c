/*
 * A program whose pool test/live-stats.test.ts reads while it runs (`tensorpool stats PID`), and whose probes it
 * traces (perf). It prints what its pool must say, as one JSON line a process, from the allocations it made:
 *   live hold [fork]  blocks of 1 MiB, 2 MiB, 3 MiB and 300 KiB, each written whole, then the 2 MiB one freed;
 *                     its line; then 20 ms sleeps (where the library publishes what changed) until its parent
 *                     is gone or 60 s have passed. With `fork`, a child forked after the line allocates and
 *                     writes 5 MiB more, prints its own line, and sleeps as well.
 *   live probes       what every probe of the pool's fires on: 8 blocks of 1 MiB allocated and freed, a block
 *                     larger than every class (96 MiB: the OS's), an iteration mark (tensorpool_mark_iteration,
 *                     found with dlsym), malloc_trim (the pool gives its free spans back); its line, then exits.
 * Each line: {"pid", "allocs", "releases", "liveBlocks", "bytesLive", "peakBytesLive", "freedBytes"}.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)

static void* writtenBlock(size_t bytes) {
  char* p = malloc(bytes);
  if (!p) {
    perror("malloc");
    exit(1);
  }
  memset(p, 0x5a, bytes);
  return p;
}

static void say(long allocs, long releases, long live, size_t bytesLive, size_t peak, size_t freed) {
  printf("{\"pid\": %ld, \"allocs\": %ld, \"releases\": %ld, \"liveBlocks\": %ld, \"bytesLive\": %zu, \"peakBytesLive\": %zu, \"freedBytes\": %zu}\n",
         (long)getpid(), allocs, releases, live, bytesLive, peak, freed);
  fflush(stdout);
}

static void sleepUntilOrphaned(pid_t parent) {
  const struct timespec step = {0, 20 * 1000 * 1000};
  for (int i = 0; i < 3000 && getppid() == parent; i++) nanosleep(&step, NULL);
}

static int hold(int withFork) {
  const pid_t parent = getppid();
  const size_t sizes[4] = {1 * MiB, 2 * MiB, 3 * MiB, 300 << 10};
  void* volatile blocks[4];
  size_t all = 0;
  for (int i = 0; i < 4; i++) {
    blocks[i] = writtenBlock(sizes[i]);
    all += sizes[i];
  }
  free(blocks[1]);
  say(4, 1, 3, all - sizes[1], all, sizes[1]);
  if (withFork) {
    const pid_t child = fork();
    if (child < 0) return 1;
    if (child == 0) {
      void* volatile more = writtenBlock(5 * MiB);
      (void)more;
      say(5, 1, 4, all - sizes[1] + 5 * MiB, all - sizes[1] + 5 * MiB, sizes[1]);
      sleepUntilOrphaned(getppid());
      return 0;
    }
  }
  sleepUntilOrphaned(parent);
  return 0;
}

static int probes(void) {
  void* volatile blocks[8];
  for (int i = 0; i < 8; i++) blocks[i] = writtenBlock(MiB);
  for (int i = 0; i < 8; i++) free(blocks[i]);
  void* volatile huge = writtenBlock(96 * MiB);
  free(huge);
  int (*mark)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "tensorpool_mark_iteration");
  if (mark) mark();
  malloc_trim(0);
  say(9, 9, 0, 0, 96 * MiB, 8 * MiB + 96 * MiB);
  return 0;
}

int main(int argc, char** argv) {
  if (argc >= 2 && strcmp(argv[1], "hold") == 0) return hold(argc >= 3 && strcmp(argv[2], "fork") == 0);
  if (argc >= 2 && strcmp(argv[1], "probes") == 0) return probes();
  fprintf(stderr, "usage: live hold [fork] | live probes\n");
  return 2;
}

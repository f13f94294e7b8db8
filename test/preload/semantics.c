/*
 * The malloc family's answers, printed one a line, so that test/preload-semantics.test.ts can run this program with
 * and without the preload library and compare: the library must answer as glibc does.
 *   semantics oom        requests larger than the machine can commit (twice RAM + swap, and 64 TiB), through
 *                        every entry point: NULL and the errno, or "served"
 *   semantics calloc     calloc(1 GiB): zero, and how much of it became resident
 *   semantics realloc-grow    a buffer grown 1 KiB at a time: bytes intact, how often it moved
 *   semantics realloc-steps   a buffer grown 1 MiB at a time to 512 MiB: bytes intact, how often it moved
 *   semantics realloc-large   a buffer grown by eighths to 256 MiB, shrunk, grown again: bytes intact, peak
 *                        resident growth against its largest size
 *   semantics realloc-arena   a buffer grown by eighths from 64 KiB to 40 MiB, a block of its size allocated
 *                        after each step: bytes intact, peak resident growth against its largest size
 *   semantics realloc-random  200 blocks of 16 B-1 MiB (3% of 1-16 MiB), one per step freed and replaced or
 *                        (a quarter of the time) realloc'd to a new size, up or down, 20,000 steps: bytes
 *                        intact, the minor page faults the steps took
 *   semantics small-then-large  40 MiB of 1,000-byte blocks written and freed (last first), then 40 blocks of
 *                        1 MiB written: the resident MiB after the frees, and the peak
 *   semantics small-freed     the same with 2,000-byte blocks (glibc's thread cache keeps none) and no 1 MiB
 *                        blocks after them
 *   semantics small-then-realloc  40 MiB of 1,000-byte blocks written and freed but the last (so that glibc
 *                        keeps them), then a buffer grown by realloc, doubling, from 1 KiB to 32 MiB: the peak
 *   semantics large-then-small  40 blocks of 1 MiB written and freed, then 3 s of small blocks only: the
 *                        resident MiB after
 *   semantics large-freed-then-small  40 blocks of 1 MiB written and freed, then 40 MiB of 1,000-byte blocks
 *                        written and kept: the peak resident MiB
 *   semantics large-freed-pause-small  the same with 1.5 s of sleep between the two
 *   semantics steady-loop  100 iterations of 16 blocks of 1 MiB written and freed, then 4 MiB of 1,000-byte
 *                        blocks written and freed: the minor page faults per iteration once warm
 *   semantics mallinfo   whether mallinfo2 and mallinfo count ten blocks of 1 MiB as in use
 *   semantics errno      errno after a served request (untouched) and after a failed posix_memalign
 *   semantics free-offset     free(p + 1) of a small block (glibc aborts)
 *   semantics double-free     a 256 KiB block freed twice (glibc aborts)
 *   semantics sigterm    ten 256 KiB blocks, then SIGTERM (its default action ends the program)
 *   semantics sigint     the same with SIGINT (Ctrl-C)
 *   semantics trim       48 MiB written and freed, then malloc_trim(0): whether the resident memory fell back
 *                        to within 16 MiB of where it was before the blocks, and what malloc_trim returned
 *   semantics chain      small blocks through every entry point: their usable sizes, how many aligned
 *                        requests came back misaligned, realloc across the threshold and back
 *   semantics rlimit-as  a 1 MiB block, then setrlimit(RLIMIT_AS, 2 GiB) (as a sandbox or Python's
 *                        resource.setrlimit does), then 100 MiB of small blocks and a 300 MiB one: served
 *   semantics rlimit-as-first  the same, the limit set before any block
 *   semantics aligned-odd  aligned_alloc with an alignment that is no power of two (0, 3, 24, 48, 96),
 *                        below and above the threshold: what the C library of this machine answers
 *   semantics address-space  a 1 MiB block, then 700 MiB (never written: address space, no memory), as a
 *                        program under `ulimit -v 1048576` may have
 *   semantics exhaust    run under an address space limit (ulimit -v): a 1 MiB block, then small blocks until
 *                        malloc says no, kept to the end: the program exits 0 (without a limit it refuses, exit 2)
 * Built by the test with the system's C compiler (cc); nothing of it enters the library.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* A value from /proc/meminfo in bytes (0 when absent). */
static uint64_t meminfo(const char* key) {
  FILE* f = fopen("/proc/meminfo", "r");
  char line[256];
  uint64_t kib = 0;
  size_t n = strlen(key);
  while (f && fgets(line, sizeof line, f)) {
    if (strncmp(line, key, n) == 0 && line[n] == ':') kib = strtoull(line + n + 1, NULL, 10);
  }
  if (f) fclose(f);
  return kib * 1024;
}

static uint64_t residentBytes(void) {
  FILE* f = fopen("/proc/self/statm", "r");
  unsigned long long size = 0, resident = 0;
  if (f) {
    if (fscanf(f, "%llu %llu", &size, &resident) != 2) resident = 0;
    fclose(f);
  }
  return resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

static void report(const char* what, size_t bytes, void* p) {
  if (p) printf("%s(%zu): served\n", what, bytes);
  else printf("%s(%zu): NULL, %s\n", what, bytes, strerror(errno));
  free(p);
}

static int oom(void) {
  const size_t sizes[] = {(size_t)(2 * (meminfo("MemTotal") + meminfo("SwapTotal"))), (size_t)1 << 46};
  for (int i = 0; i < 2; i++) {
    const size_t bytes = sizes[i];
    errno = 0;
    void* served = malloc(bytes);
    report("malloc", bytes, served);
    /* calloc writes what it does not know to be zero: where malloc served a block the machine cannot hold,
       a calloc that writes would fill the machine; asked only where malloc answered NULL. */
    if (served) printf("calloc(%zu): not asked\n", bytes);
    else report("calloc", bytes, calloc(1, bytes));
    errno = 0;
    report("memalign", bytes, memalign(64, bytes));
    errno = 0;
    report("aligned_alloc", bytes, aligned_alloc(64, bytes));
    void* p = NULL;
    errno = 0;
    const int result = posix_memalign(&p, 64, bytes);
    printf("posix_memalign(%zu): %s, errno %s\n", bytes, strerror(result), strerror(errno));
    free(result == 0 ? p : NULL);
    char* small = malloc(100);
    memset(small, 7, 100);
    errno = 0;
    void* grown = realloc(small, bytes);
    report("realloc", bytes, grown);
    if (!grown) printf("realloc(%zu): old block intact: %s\n", bytes, small[99] == 7 ? "yes" : "no");
    if (!grown) free(small);
  }
  void* tebibyte = malloc((size_t)1 << 40);
  free(tebibyte);
  errno = 0;
  if (tebibyte) printf("calloc(2^20, 2^20): not asked\n");
  else report("calloc(2^20, 2^20)", (size_t)1 << 40, calloc((size_t)1 << 20, (size_t)1 << 20));
  return 0;
}

static int callocFresh(void) {
  const size_t bytes = (size_t)1 << 30;
  const uint64_t before = residentBytes();
  unsigned char* p = calloc(1, bytes);
  if (!p) return printf("calloc(1 GiB): NULL\n"), 0;
  const uint64_t grew = residentBytes() - before;
  int zero = 1;
  for (size_t i = 0; i < bytes; i += (size_t)1 << 24) zero = zero && p[i] == 0 && p[bytes - 1 - i] == 0;
  printf("calloc(1 GiB): %s, resident %s 64 MiB\n", zero ? "zero" : "NOT ZERO", grew < ((uint64_t)64 << 20) ? "below" : "above");
  free(p);
  return 0;
}

static int errnoKept(void) {
  errno = EDOM;
  void* a = malloc(256 << 10);
  void* b = calloc(1, 256 << 10);
  void* c = NULL;
  const int aligned = posix_memalign(&c, 64, 256 << 10);
  char* d = realloc(malloc(1000), 300 << 10);
  free(a);
  free(b);
  free(c);
  free(d);
  printf("served: %s; errno after them %s\n", a && b && aligned == 0 && d ? "all" : "not all", errno == EDOM ? "untouched" : strerror(errno));
  void* e = NULL;
  errno = 0;
  const int refused = posix_memalign(&e, 64, SIZE_MAX / 2);
  printf("posix_memalign(SIZE_MAX / 2): %s, errno %s\n", strerror(refused), strerror(errno));
  return 0;
}

// A buffer grown by realloc 1 KiB at a time from 256 KiB to 1 MiB: its bytes intact, and how often it moved
// (every time, each a copy of the whole buffer, before realloc resized pool blocks in place).
static int reallocGrow(void) {
  size_t length = 256 << 10;
  unsigned char* buffer = malloc(length);
  for (size_t i = 0; i < length; i++) buffer[i] = (unsigned char)(i * 7);
  int moves = 0, intact = 1;
  while (length < (1 << 20)) {
    unsigned char* grown = realloc(buffer, length + 1024);
    if (!grown) return 1;
    moves += grown != buffer;
    buffer = grown;
    for (size_t i = length; i < length + 1024; i++) buffer[i] = (unsigned char)(i * 7);
    length += 1024;
  }
  for (size_t i = 0; i < length; i++) intact &= buffer[i] == (unsigned char)(i * 7);
  free(buffer);
  printf("bytes %s; moved %d times in 768 reallocs\n", intact ? "intact" : "CORRUPT", moves);
  return 0;
}

// A buffer grown by realloc 1 MiB at a time from 1 MiB to 512 MiB, one byte of each page written: those bytes
// intact, and how often it moved (glibc's mapping moves about once each time it has doubled: the kernel puts it
// below its old place, whose hole the next steps grow into; every second step, 7x glibc's time, before the
// library's mappings grew past their last 2 MiB granule in place).
static int reallocSteps(void) {
  const size_t step = 1 << 20, page = 4096;
  unsigned char* buffer = NULL;
  size_t length = 0;
  int moves = 0, intact = 1;
  while (length < (512u << 20)) {
    unsigned char* grown = realloc(buffer, length + step);
    if (!grown) return perror("realloc"), 1;
    moves += buffer != NULL && grown != buffer;
    buffer = grown;
    for (size_t i = length; i < length + step; i += page) buffer[i] = (unsigned char)(i / page * 7);
    length += step;
  }
  for (size_t i = 0; i < length; i += page) intact &= buffer[i] == (unsigned char)(i / page * 7);
  free(buffer);
  printf("bytes %s; moved %d times in 511 reallocs\n", intact ? "intact" : "CORRUPT", moves);
  return 0;
}

/* A field of /proc/self/status in bytes ("VmHWM:", the peak resident; "VmRSS:", resident now). */
static uint64_t statusBytes(const char* field) {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  uint64_t kib = 0;
  while (f && fgets(line, sizeof line, f)) {
    if (strncmp(line, field, strlen(field)) == 0) kib = strtoull(line + strlen(field), NULL, 10);
  }
  if (f) fclose(f);
  return kib << 10;
}
static uint64_t peakResident(void) { return statusBytes("VmHWM:"); }
static uint64_t resident(void) { return statusBytes("VmRSS:"); }

/* 40 MiB of small blocks of `size` bytes, written, then freed last first; then, with `large`, 40 blocks of
 * 1 MiB written. Prints the resident MiB after the small blocks were freed and the peak. */
static int smallThenLarge(size_t size, int large) {
  const size_t count = ((size_t)40 << 20) / size;
  void** small = malloc(count * sizeof *small);
  if (!small) return perror("malloc"), 1;
  for (size_t i = 0; i < count; i++) {
    if (!(small[i] = malloc(size))) return perror("malloc"), 1;
    memset(small[i], 1, size);
  }
  for (size_t i = count; i-- > 0;) free(small[i]);
  const uint64_t afterFree = resident();
  void* buffers[40];
  for (int i = 0; large && i < 40; i++) {
    if (!(buffers[i] = malloc(1 << 20))) return perror("malloc"), 1;
    memset(buffers[i], 2, 1 << 20);
  }
  printf("resident after the small blocks %llu MiB, peak %llu MiB\n", (unsigned long long)(afterFree >> 20),
         (unsigned long long)(peakResident() >> 20));
  return 0;
}

/* 40 MiB of 1,000-byte blocks written, then freed but the last (the heap's top cannot shrink below it), then a buffer grown by realloc from 1 KiB to 32 MiB, doubling, each step
 * written: the peak resident MiB. glibc grows the buffer into the memory the small blocks freed; the library
 * moves it to the pool, into a mapping of its own past 1 MiB. */
static int smallThenRealloc(void) {
  const size_t count = ((size_t)40 << 20) / 1000;
  void** small = malloc(count * sizeof *small);
  if (!small) return perror("malloc"), 1;
  for (size_t i = 0; i < count; i++) {
    if (!(small[i] = malloc(1000))) return perror("malloc"), 1;
    memset(small[i], 1, 1000);
  }
  for (size_t i = 0; i + 1 < count; i++) free(small[i]);
  size_t length = 1024;
  unsigned char* buffer = malloc(length);
  if (!buffer) return perror("malloc"), 1;
  memset(buffer, 3, length);
  while (length < ((size_t)32 << 20)) {
    unsigned char* grown = realloc(buffer, 2 * length);
    if (!grown) return perror("realloc"), 1;
    buffer = grown;
    memset(buffer + length, 3, length);
    length *= 2;
  }
  int intact = 1;
  for (size_t i = 0; i < length; i += 4096) intact &= buffer[i] == 3;
  printf("bytes %s; peak %llu MiB\n", intact ? "intact" : "CORRUPT", (unsigned long long)(peakResident() >> 20));
  free(buffer);
  free(small[count - 1]);
  free(small);
  return 0;
}

/* 40 blocks of 1 MiB written and freed, then, for 3 s, small blocks only (1,000 allocated and freed every
 * 100 ms): the resident MiB after. */
static int largeThenSmall(void) {
  void* buffers[40];
  for (int i = 0; i < 40; i++) {
    if (!(buffers[i] = malloc(1 << 20))) return perror("malloc"), 1;
    memset(buffers[i], 2, 1 << 20);
  }
  for (int i = 0; i < 40; i++) free(buffers[i]);
  for (int step = 0; step < 30; step++) {
    usleep(100000);
    for (int i = 0; i < 1000; i++) {
      char* volatile small = malloc(1000);
      if (!small) return perror("malloc"), 1;
      small[0] = 1;
      free(small);
    }
  }
  printf("resident after 3 s of small blocks %llu MiB\n", (unsigned long long)(resident() >> 20));
  return 0;
}

/* 40 blocks of 1 MiB written and freed, then (after `pauseMs` of sleep) 40 MiB of 1,000-byte blocks written
 * and kept: the peak resident MiB. glibc unmaps the 1 MiB blocks at free; the pool keeps them until decay. */
static int largeFreedThenSmall(unsigned pauseMs) {
  void* buffers[40];
  for (int i = 0; i < 40; i++) {
    if (!(buffers[i] = malloc(1 << 20))) return perror("malloc"), 1;
    memset(buffers[i], 2, 1 << 20);
  }
  for (int i = 0; i < 40; i++) free(buffers[i]);
  if (pauseMs) usleep(pauseMs * 1000);
  const size_t count = ((size_t)40 << 20) / 1000;
  for (size_t i = 0; i < count; i++) {
    char* small = malloc(1000);
    if (!small) return perror("malloc"), 1;
    memset(small, 1, 1000);
  }
  printf("peak %llu MiB\n", (unsigned long long)(peakResident() >> 20));
  return 0;
}

/* A loop in a steady state, 100 iterations: 16 blocks of 1 MiB written and freed, then 4 MiB of 1,000-byte
 * blocks written and freed (glibc's heap grows back to where it was, then gives them back). The minor page
 * faults per iteration of the last 90: glibc's heap faults its 4 MiB in again each time, the pool's memory,
 * reused, never. */
static int steadyLoop(void) {
  enum { kIterations = 100, kWarm = 10, kSmall = (4 << 20) / 1000 };
  static void* small[kSmall];
  struct rusage warm, end;
  for (int iteration = 0; iteration < kIterations; iteration++) {
    if (iteration == kWarm) getrusage(RUSAGE_SELF, &warm);
    void* large[16];
    for (int i = 0; i < 16; i++) {
      if (!(large[i] = malloc(1 << 20))) return perror("malloc"), 1;
      memset(large[i], 2, 1 << 20);
    }
    for (int i = 0; i < 16; i++) free(large[i]);
    for (int i = 0; i < kSmall; i++) {
      if (!(small[i] = malloc(1000))) return perror("malloc"), 1;
      memset(small[i], 1, 1000);
    }
    for (int i = 0; i < kSmall; i++) free(small[i]);
  }
  getrusage(RUSAGE_SELF, &end);
  printf("minor faults per iteration %ld\n", (end.ru_minflt - warm.ru_minflt) / (kIterations - kWarm));
  return 0;
}

/* mallinfo2 and mallinfo before and after ten blocks of 1 MiB: whether the bytes in use (in the heap and in
 * mappings) grew by at least 10 MiB. */
static int mallinfoCounts(void) {
  const struct mallinfo2 before = mallinfo2();
  const struct mallinfo beforeInts = mallinfo();
  void* volatile blocks[10];
  for (int i = 0; i < 10; i++) blocks[i] = malloc(1 << 20);
  const struct mallinfo2 after = mallinfo2();
  const struct mallinfo afterInts = mallinfo();
  const size_t grew = (after.uordblks + after.hblkhd) - (before.uordblks + before.hblkhd);
  const long grewInts = ((long)afterInts.uordblks + afterInts.hblkhd) - ((long)beforeInts.uordblks + beforeInts.hblkhd);
  printf("mallinfo2 counts the blocks: %s; mallinfo: %s\n", grew >= ((size_t)10 << 20) ? "yes" : "no",
         grewInts >= (10L << 20) ? "yes" : "no");
  for (int i = 0; i < 10; i++) free(blocks[i]);
  return 0;
}

/* Grows `buffer` by an eighth at a time up to `to` bytes, writing what each step adds. */
static unsigned char* growByEighths(unsigned char* buffer, size_t* length, size_t to) {
  while (*length < to) {
    size_t next = *length + *length / 8;
    if (next > to) next = to;
    unsigned char* grown = realloc(buffer, next);
    if (!grown) return NULL;
    buffer = grown;
    for (size_t i = *length; i < next; i++) buffer[i] = (unsigned char)(i * 7);
    *length = next;
  }
  return buffer;
}

/* A buffer grown by realloc, an eighth at a time, from 1 MiB to 256 MiB (past every default class: mapped by
 * the OS), shrunk to 96 MiB and grown to 192 MiB again: its bytes intact, and the process's peak resident
 * growth against the largest size the buffer had (two copies of it at once, old and new, made that ~1.8). */
static int reallocLarge(void) {
  const uint64_t before = peakResident();
  size_t length = 1 << 20;
  unsigned char* buffer = malloc(length);
  for (size_t i = 0; i < length; i++) buffer[i] = (unsigned char)(i * 7);
  buffer = growByEighths(buffer, &length, (size_t)256 << 20);
  if (!buffer) return 1;
  unsigned char* shrunk = realloc(buffer, (size_t)96 << 20);
  if (!shrunk) return 1;
  length = (size_t)96 << 20;
  buffer = growByEighths(shrunk, &length, (size_t)192 << 20);
  if (!buffer) return 1;
  int intact = 1;
  for (size_t i = 0; i < length; i++) intact &= buffer[i] == (unsigned char)(i * 7);
  const uint64_t growth = peakResident() - before;
  free(buffer);
  printf("bytes %s; peak resident growth %.2f x the largest size\n", intact ? "intact" : "CORRUPT", (double)growth / (double)((size_t)256 << 20));
  return 0;
}

/* A buffer grown by realloc, an eighth at a time, from 64 KiB to 40 MiB (inside the default classes: an arena
 * span at first), after each step a block of the buffer's size allocated and never written (address space
 * only: a neighbour that no free span before it holds, so that the buffer cannot grow in place), as a program
 * appending to a string while it allocates others: its bytes intact, and the process's peak resident growth
 * against the buffer's largest size (glibc mremaps it: ~1.0; copied beside the old one at every step, the
 * pool's span made it ~1.9). */
static int reallocArena(void) {
  enum { kMaxSteps = 128 };
  void* neighbours[kMaxSteps];
  int steps = 0;
  const size_t largest = (size_t)40 << 20;
  const uint64_t before = peakResident();
  size_t length = 64 << 10;
  unsigned char* buffer = malloc(length);
  if (!buffer) return 1;
  for (size_t i = 0; i < length; i++) buffer[i] = (unsigned char)(i * 7);
  while (length < largest && steps < kMaxSteps) {
    size_t next = length + length / 8;
    if (next > largest) next = largest;
    unsigned char* grown = realloc(buffer, next);
    if (!grown) return 1;
    buffer = grown;
    for (size_t i = length; i < next; i++) buffer[i] = (unsigned char)(i * 7);
    length = next;
    neighbours[steps++] = malloc(length);
  }
  int intact = length == largest;
  for (size_t i = 0; i < length; i++) intact &= buffer[i] == (unsigned char)(i * 7);
  const uint64_t growth = peakResident() - before;
  free(buffer);
  for (int i = 0; i < steps; i++) free(neighbours[i]);
  printf("bytes %s; peak resident growth %.2f x the largest size\n", intact ? "intact" : "CORRUPT", (double)growth / (double)largest);
  return 0;
}

/* A stamp of block `serial` at offset `at`: every 4 KiB of a block, and its last byte. */
static unsigned char stampOf(uint64_t serial, size_t at) { return (unsigned char)((serial * 0x9E3779B97F4A7C15ull + at / 4096) >> 56); }

static uint64_t nextRandom(uint64_t* s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* 16 B-1 MiB log-uniform (by doubling, then uniform within it), 3% of 1-16 MiB. */
static size_t randomSize(uint64_t* s) {
  const int big = nextRandom(s) % 100 < 3;
  const unsigned shift = big ? 20 + (unsigned)(nextRandom(s) % 4) : 4 + (unsigned)(nextRandom(s) % 16);
  return ((size_t)1 << shift) + (size_t)(nextRandom(s) % ((size_t)1 << shift));
}

/* Whether the stamps of a block of `bytes` hold in its first `kept` bytes (a realloc that shrank it kept those). */
static int stampsHold(const unsigned char* p, size_t kept, size_t bytes, uint64_t serial) {
  for (size_t at = 0; at < kept; at += 4096) {
    if (p[at] != stampOf(serial, at)) return 0;
  }
  return kept < bytes || p[bytes - 1] == stampOf(serial, bytes - 1);
}

static void stamp(unsigned char* p, size_t bytes, uint64_t serial) {
  for (size_t at = 0; at < bytes; at += 4096) p[at] = stampOf(serial, at);
  p[bytes - 1] = stampOf(serial, bytes - 1);
}

// A program's blocks realloc'd to sizes drawn at random: its page faults against glibc's (the pool gave the
// memory each realloc left back at once, and whatever a realloc moved into a mapping was unmapped once freed:
// 6x glibc's faults).
static int reallocRandom(void) {
  enum { kSlots = 200, kSteps = 20000 };
  unsigned char* blocks[kSlots] = {0};
  size_t sizes[kSlots] = {0};
  uint64_t serials[kSlots] = {0};
  uint64_t s = 88172645463325252ull;
  int intact = 1;
  struct rusage before, after;
  getrusage(RUSAGE_SELF, &before);
  for (int step = 0; step < kSteps + kSlots; step++) {
    const int slot = step < kSlots ? step : (int)(nextRandom(&s) % kSlots);
    const size_t bytes = randomSize(&s);
    if (blocks[slot] && nextRandom(&s) % 4 == 0) {
      unsigned char* moved = realloc(blocks[slot], bytes);
      if (!moved) return 1;
      intact &= stampsHold(moved, bytes < sizes[slot] ? bytes : sizes[slot], sizes[slot], serials[slot]);
      blocks[slot] = moved;
    } else {
      if (blocks[slot]) intact &= stampsHold(blocks[slot], sizes[slot], sizes[slot], serials[slot]);
      free(blocks[slot]);
      blocks[slot] = malloc(bytes);
      if (!blocks[slot]) return 1;
    }
    sizes[slot] = bytes;
    serials[slot] = (uint64_t)step;
    stamp(blocks[slot], bytes, serials[slot]);
  }
  getrusage(RUSAGE_SELF, &after);
  for (int i = 0; i < kSlots; i++) {
    intact &= stampsHold(blocks[i], sizes[i], sizes[i], serials[i]);
    free(blocks[i]);
  }
  printf("bytes %s; minor faults %ld\n", intact ? "intact" : "CORRUPT", after.ru_minflt - before.ru_minflt);
  return 0;
}

// malloc_usable_size of a small block (the C library's) is the C library's answer.
static int usableSize(void) {
  void* p = malloc(100);
  printf("malloc_usable_size(malloc(100)) >= 100: %s\n", malloc_usable_size(p) >= 100 ? "yes" : "no");
  free(p);
  return 0;
}

// Blocks below the threshold through every entry point, their usable sizes printed (the allocator's
// answer), grown and shrunk across the threshold with their bytes checked, and freed: with another allocator
// preloaded after the library, the output must be that allocator's alone.
static int chain(void) {
  const size_t sizes[] = {1, 7, 24, 100, 1000, 5000};
  for (int i = 0; i < 6; i++) {
    const size_t n = sizes[i];
    /* (not pvalloc: jemalloc has none, and glibc's block would reach jemalloc's free) */
    void* blocks[8] = {malloc(n), calloc(1, n), realloc(NULL, n), memalign(32, n), memalign(64, n), aligned_alloc(64, n),
                       valloc(n), NULL};
    if (posix_memalign(&blocks[7], 64, n) != 0) blocks[7] = NULL;
    /* the aligned ones apart: mimalloc's usable size of an aligned block depends on where it landed */
    printf("%zu:", n);
    for (int j = 0; j < 8; j++) printf("%s %zu", j == 3 ? "\n  aligned:" : "", blocks[j] ? malloc_usable_size(blocks[j]) : (size_t)0);
    printf("\n");
    for (int j = 0; j < 8; j++) free(blocks[j]);
  }
  /* Every alignment asked is given: jemalloc, tcmalloc and mimalloc align a block of 8 bytes or less to 8
   * only, and jemalloc's memalign(a, 0) not at all (so memalign from 1 byte). */
  int misaligned = 0;
  for (size_t alignment = 16; alignment <= 4096; alignment *= 2) {
    for (size_t n = 0; n <= 64; n++) {
      void* blocks[3] = {aligned_alloc(alignment, n), n ? memalign(alignment, n) : NULL, NULL};
      if (posix_memalign(&blocks[2], alignment, n) != 0) blocks[2] = NULL;
      for (int j = 0; j < 3; j++) misaligned += (uintptr_t)blocks[j] % alignment != 0;
      for (int j = 0; j < 3; j++) free(blocks[j]);
    }
  }
  printf("aligned requests of 0 to 64 bytes at 16 to 4096: %d misaligned\n", misaligned);
  unsigned char* p = malloc(100);
  for (int i = 0; i < 100; i++) p[i] = (unsigned char)i;
  p = realloc(p, 1 << 20);  /* above the threshold: to the pool */
  p = realloc(p, 50);       /* below it again: back to the next allocator */
  int intact = 1;
  for (int i = 0; i < 50; i++) intact &= p[i] == (unsigned char)i;
  printf("realloc across the threshold and back: %s, usable %zu\n", intact ? "intact" : "CORRUPT", malloc_usable_size(p));
  free(p);
  return 0;
}

static int trim(void) {
  enum { kBlocks = 12 };
  const size_t bytes = (size_t)4 << 20;  /* a request the pool serves (below its largest class) */
  const uint64_t before = residentBytes();
  void* blocks[kBlocks];
  for (int i = 0; i < kBlocks; i++) {
    blocks[i] = malloc(bytes);
    if (!blocks[i]) return printf("malloc(4 MiB): NULL\n"), 0;
    memset(blocks[i], i + 1, bytes);
  }
  for (int i = 0; i < kBlocks; i++) free(blocks[i]);
  const int returned = malloc_trim(0);
  const uint64_t after = residentBytes();
  printf("48 MiB freed, then malloc_trim(0): resident %s 16 MiB of before\n", after < before + ((uint64_t)16 << 20) ? "within" : "NOT within");
  printf("malloc_trim(0) returned %d\n", returned);
  return 0;
}

/* What a lowered address space limit leaves a program that glibc runs in it: 100 MiB of small blocks (the
   heap grows) and a 300 MiB block (a mapping of its own), with 1 MiB blocks (the pool's) between them. */
static int rlimitAs(int blockFirst) {
  char* volatile first = blockFirst ? malloc(1 << 20) : NULL;
  if (first) memset(first, 1, 1 << 20);
  const struct rlimit limit = {(rlim_t)2 << 30, (rlim_t)2 << 30};
  if (setrlimit(RLIMIT_AS, &limit) != 0) return perror("setrlimit"), 1;
  size_t small = 0, pooled = 0;
  for (int i = 0; i < 200000; i++) {
    char* p = malloc(512);
    if (!p) break;
    p[0] = 1;
    small++;
  }
  for (int i = 0; i < 20; i++) {
    char* p = malloc(1 << 20);
    if (!p) break;
    memset(p, 2, 1 << 20);
    pooled++;
  }
  char* large = malloc(300 << 20);
  if (large) memset(large, 3, 300 << 20);
  printf("under RLIMIT_AS 2 GiB: %zu of 200000 small blocks, %zu of 20 1 MiB blocks, 300 MiB block %s\n", small, pooled,
         large ? "served" : strerror(errno));
  return 0;
}

/* What a program has under an address space limit: 1 MiB blocks (the pool's) until one is refused, then, all
   freed, the largest single block (to within 1 MiB). The limit is `limitMiB` MiB set by the program itself, or
   with 0 the one it was started under (`ulimit -v`). */
static int addressLimit(size_t limitMiB) {
  if (limitMiB) {
    const struct rlimit limit = {(rlim_t)limitMiB << 20, (rlim_t)limitMiB << 20};
    if (setrlimit(RLIMIT_AS, &limit) != 0) return perror("setrlimit"), 1;
  }
  enum { kMost = 1 << 16 };
  static char* blocks[kMost];
  size_t count = 0;
  while (count < kMost && (blocks[count] = malloc(1 << 20)) != NULL) memset(blocks[count++], 1, 4096);
  for (size_t i = 0; i < count; i++) free(blocks[i]);
  size_t low = 0, high = (size_t)1 << 40;
  while (high - low > (1 << 20)) {
    const size_t mid = low + (high - low) / 2;
    char* p = malloc(mid);
    if (p) low = mid;
    else high = mid;
    free(p);
  }
  printf("%zu blocks of 1 MiB, largest block %zu MiB\n", count, low >> 20);
  return 0;
}

/* Whether /proc says SIGINT and SIGTERM have handlers in this process. */
static const char* interruptsCaught(void) {
  FILE* status = fopen("/proc/self/status", "r");
  char line[256];
  unsigned long long caught = 0;
  while (status && fgets(line, sizeof line, status)) {
    if (!strncmp(line, "SigCgt:", 7)) caught = strtoull(line + 7, NULL, 16);
  }
  if (status) fclose(status);
  const unsigned long long both = (1ull << (SIGINT - 1)) | (1ull << (SIGTERM - 1));
  return (caught & both) == both ? "both caught" : (caught & both) ? "one caught" : "neither caught";
}

/* What a program sees of SIGINT's and SIGTERM's actions: none installed, then SIGINT's default action set with
   flags and a mask of its own, once it has allocated a block of the pool's sizes. */
static int signalView(void) {
  printf("before any large block: SIGINT and SIGTERM %s\n", interruptsCaught());
  free(malloc(256 << 10));
  struct sigaction set;
  memset(&set, 0, sizeof set);
  set.sa_handler = SIG_DFL;
  set.sa_flags = SA_RESTART;
  sigemptyset(&set.sa_mask);
  sigaddset(&set.sa_mask, SIGUSR1);
  if (sigaction(SIGINT, &set, NULL) != 0) return perror("sigaction"), 1;
  struct sigaction seen;
  sigaction(SIGINT, NULL, &seen);
  printf("SIGINT: %s action, SA_RESTART %s, SIGUSR1 %s its mask\n", seen.sa_handler == SIG_DFL ? "default" : "another",
         (seen.sa_flags & SA_RESTART) ? "set" : "not set", sigismember(&seen.sa_mask, SIGUSR1) ? "in" : "not in");
  sigaction(SIGTERM, NULL, &seen);
  printf("SIGTERM: %s action, SA_RESTART %s, mask %s\n", seen.sa_handler == SIG_DFL ? "default" : "another",
         (seen.sa_flags & SA_RESTART) ? "set" : "not set", sigismember(&seen.sa_mask, SIGUSR1) ? "not empty" : "empty");
  return 0;
}

static int alignedOdd(void) {
  const size_t alignments[] = {0, 3, 24, 48, 96};
  const size_t sizes[] = {100, 1 << 20};
  for (size_t i = 0; i < sizeof alignments / sizeof *alignments; i++) {
    for (size_t j = 0; j < 2; j++) {
      size_t rounded = 1;
      while (rounded < alignments[i]) rounded *= 2;
      errno = 0;
      char* p = aligned_alloc(alignments[i], sizes[j]);
      if (p) memset(p, 1, sizes[j]);
      printf("aligned_alloc(%zu, %zu): %s\n", alignments[i], sizes[j],
             !p ? strerror(errno) : (uintptr_t)p % rounded == 0 ? "served, aligned to the next power of two" : "served, MISALIGNED");
      free(p);
    }
  }
  return 0;
}

static int addressSpace(void) {
  char* volatile first = malloc(1 << 20);
  if (first) memset(first, 1, 1 << 20);
  void* large = malloc((size_t)700 << 20);
  printf("malloc(700 MiB) after a 1 MiB block: %s\n", large ? "served" : strerror(errno));
  free(large);
  free(first);
  return 0;
}

/* The limit comes from outside, the same with and without the library: a limit the program set from what it
 * saw mapped would count the pool's reservation (16 GiB of address space) under the library, which gives that
 * back once the C library runs short, so that the program filled gigabytes of small blocks before NULL. */
static int exhaust(void) {
  struct rlimit limit;
  if (getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) {
    fprintf(stderr, "semantics exhaust: run it under an address space limit (ulimit -v)\n");
    return 2;
  }
  char* volatile first = malloc(1 << 20);
  if (first) memset(first, 1, 1 << 20);
  size_t held = 0;
  for (size_t size = 4096; size >= 16; size /= 2) {
    while (malloc(size)) held += size;
  }
  printf("memory exhausted after %s MiB of small blocks\n", held > ((size_t)16 << 20) ? "more than 16" : "less than 16");
  return 0;
}

int main(int argc, char** argv) {
  const char* what = argc > 1 ? argv[1] : "";
  setvbuf(stdout, NULL, _IONBF, 0);
  if (!strcmp(what, "oom")) return oom();
  if (!strcmp(what, "realloc-grow")) return reallocGrow();
  if (!strcmp(what, "realloc-steps")) return reallocSteps();
  if (!strcmp(what, "realloc-large")) return reallocLarge();
  if (!strcmp(what, "realloc-arena")) return reallocArena();
  if (!strcmp(what, "realloc-random")) return reallocRandom();
  if (!strcmp(what, "usable-size")) return usableSize();
  if (!strcmp(what, "small-then-large")) return smallThenLarge(1000, 1);
  if (!strcmp(what, "small-freed")) return smallThenLarge(2000, 0);
  if (!strcmp(what, "small-then-realloc")) return smallThenRealloc();
  if (!strcmp(what, "large-then-small")) return largeThenSmall();
  if (!strcmp(what, "large-freed-then-small")) return largeFreedThenSmall(0);
  if (!strcmp(what, "large-freed-pause-small")) return largeFreedThenSmall(1500);
  if (!strcmp(what, "steady-loop")) return steadyLoop();
  if (!strcmp(what, "mallinfo")) return mallinfoCounts();
  if (!strcmp(what, "calloc")) return callocFresh();
  if (!strcmp(what, "errno")) return errnoKept();
  if (!strcmp(what, "chain")) return chain();
  if (!strcmp(what, "trim")) return trim();
  if (!strcmp(what, "rlimit-as")) return rlimitAs(1);
  if (!strcmp(what, "rlimit-as-first")) return rlimitAs(0);
  if (!strcmp(what, "exhaust")) return exhaust();
  if (!strcmp(what, "signal-view")) return signalView();
  if (!strcmp(what, "address-limit")) return addressLimit(argc > 2 ? strtoul(argv[2], NULL, 10) : 0);
  if (!strcmp(what, "address-space")) return addressSpace();
  if (!strcmp(what, "aligned-odd")) return alignedOdd();
  if (!strcmp(what, "free-offset")) {
    char* volatile p = malloc(24);
    memset(p, 0xff, 24);  /* the word before p + 1 then has its top bit set */
    free(p + 1);
    return 0;
  }
  if (!strcmp(what, "double-free")) {
    char* volatile p = malloc(256 << 10);
    void* volatile guard = malloc(100);
    free(p);
    free(p);
    free(guard);
    return 0;
  }
  if (!strcmp(what, "sigterm") || !strcmp(what, "sigint")) {
    const int signal = !strcmp(what, "sigint") ? SIGINT : SIGTERM;
    struct sigaction seen;
    sigaction(signal, NULL, &seen);  /* the program's own view: the default action it left */
    printf("%s's action: %s\n", what, seen.sa_handler == SIG_DFL ? "default" : "not the default");
    for (int i = 0; i < 10; i++) free(malloc(256 << 10));
    raise(signal);
    sleep(30);
    return 0;
  }
  fprintf(stderr, "usage: semantics oom|calloc|realloc-grow|realloc-steps|realloc-large|realloc-arena|usable-size|small-then-large|small-freed|small-then-realloc|large-then-small|large-freed-then-small|large-freed-pause-small|steady-loop|mallinfo|errno|rlimit-as|rlimit-as-first|exhaust|address-limit [MiB]|signal-view|address-space|aligned-odd|free-offset|double-free|sigterm\n");
  return 2;
}

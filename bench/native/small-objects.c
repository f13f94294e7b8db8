// Small-object programs for bench/small-objects.ts: each allocates and frees through the C library's malloc
// family (whose is LD_PRELOAD's choice), writes what it allocates, and prints on stdout a checksum of what it
// read back, the same under every allocator. What a program measures of the allocator itself (not the
// kernel: bench/native/rusage.cc does that) it prints on stderr as `small-objects: NAME VALUE` lines.
// Plain C, built by the bench with `cc -O2`: the loop around the allocator costs a few instructions a pair.
//
//   small-objects churn PAIRS SLOTS LOW HIGH [pool]
//                                            SLOTS blocks live; PAIRS times one is freed and replaced by a
//                                            block of LOW to HIGH bytes (powers of two; log-uniform, HIGH
//                                            excluded), its first and last bytes written. With `pool`, a block
//                                            of 1 MiB (above the preload library's default threshold, so its
//                                            pool is made) is allocated first and kept: the path a program
//                                            that uses the pool takes
//   small-objects phases MIB LOW HIGH        one size at a time (the powers of two from LOW to HIGH and 1.5
//                                            times each, up to HIGH): MIB MiB of blocks of that size allocated
//                                            and written, then all freed, then the next size
//   small-objects trim COUNT                 COUNT blocks of 16-64 bytes allocated and written, all freed,
//                                            malloc_trim(0); prints `rss-after-trim-kib` (/proc/self/statm)
//   small-objects realloc-same COUNT         COUNT blocks of 1-24 bytes, each realloc'd to its own size 8
//                                            times; prints `realloc-same-moved` (how many of those moved)
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t state = 0x9E3779B97F4A7C15ull;

static uint64_t next(void) {
  state ^= state << 13;
  state ^= state >> 7;
  state ^= state << 17;
  return state;
}

static void* allocate(size_t bytes) {
  void* p = malloc(bytes);
  if (p == NULL) {
    fprintf(stderr, "small-objects: malloc(%zu) failed\n", bytes);
    exit(1);
  }
  return p;
}

// LOW to HIGH bytes (powers of two, HIGH excluded), log-uniform without libm: a power of two from LOW up,
// then uniform up to twice it.
static size_t sizeBetween(uint64_t r, unsigned lowShift, unsigned highShift) {
  const size_t low = (size_t)1 << (lowShift + (unsigned)(r % (highShift - lowShift)));
  return low + (size_t)((r >> 8) & (low - 1));
}

static uint64_t checksum = 1469598103934665603ull;
static void mix(uint64_t v) { checksum = (checksum ^ v) * 1099511628211ull; }

static int churn(long pairs, long slots, unsigned lowShift, unsigned highShift, int pool) {
  unsigned char** live = allocate((size_t)slots * sizeof *live);
  size_t* sizes = allocate((size_t)slots * sizeof *sizes);
  unsigned char* large = NULL;
  if (pool) {
    large = allocate(1 << 20);
    memset(large, 1, 1 << 20);
  }
  for (long i = 0; i < slots; i++) {
    sizes[i] = sizeBetween(next(), lowShift, highShift);
    live[i] = allocate(sizes[i]);
    live[i][0] = live[i][sizes[i] - 1] = (unsigned char)i;
  }
  for (long i = 0; i < pairs; i++) {
    const uint64_t r = next();
    const size_t slot = (size_t)(r >> 40) % (size_t)slots;
    unsigned char* old = live[slot];
    mix(old[0] + old[sizes[slot] - 1]);
    free(old);
    const size_t bytes = sizeBetween(r, lowShift, highShift);
    unsigned char* p = allocate(bytes);
    p[0] = p[bytes - 1] = (unsigned char)r;
    live[slot] = p;
    sizes[slot] = bytes;
  }
  for (long i = 0; i < slots; i++) {
    mix(live[i][0] + live[i][sizes[i] - 1]);
    free(live[i]);
  }
  if (large) {
    mix(large[12345]);
    free(large);
  }
  free(sizes);
  free(live);
  return 0;
}

static void phase(long mib, size_t size) {
  const size_t count = ((size_t)mib << 20) / size;
  unsigned char** blocks = allocate(count * sizeof *blocks);
  for (size_t i = 0; i < count; i++) {
    blocks[i] = allocate(size);
    memset(blocks[i], (int)(i + size), size);
  }
  for (size_t i = 0; i < count; i++) {
    mix(blocks[i][size - 1]);
    free(blocks[i]);
  }
  free(blocks);
}

static int phases(long mib, unsigned lowShift, unsigned highShift) {
  for (unsigned shift = lowShift; shift <= highShift; shift++) {
    phase(mib, (size_t)1 << shift);
    if (shift < highShift) phase(mib, (size_t)3 << (shift - 1));
  }
  return 0;
}

static long residentKiB(void) {
  long pages = 0, resident = 0;
  FILE* f = fopen("/proc/self/statm", "r");
  if (f == NULL || fscanf(f, "%ld %ld", &pages, &resident) != 2) {
    fprintf(stderr, "small-objects: cannot read /proc/self/statm\n");
    exit(1);
  }
  fclose(f);
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

static int trim(long count) {
  unsigned char** blocks = allocate((size_t)count * sizeof *blocks);
  for (long i = 0; i < count; i++) {
    const size_t size = 16 + (size_t)(next() % 49);
    blocks[i] = allocate(size);
    memset(blocks[i], (int)i, size);
  }
  for (long i = 0; i < count; i++) {
    mix(blocks[i][0]);
    free(blocks[i]);
  }
  free(blocks);
  malloc_trim(0);
  fprintf(stderr, "small-objects: rss-after-trim-kib %ld\n", residentKiB());
  return 0;
}

static int reallocSame(long count) {
  long moved = 0;
  for (long i = 0; i < count; i++) {
    const size_t size = 1 + (size_t)(next() % 24);
    unsigned char* p = allocate(size);
    memset(p, (int)i, size);
    for (int k = 0; k < 8; k++) {
      unsigned char* q = realloc(p, size);
      if (q == NULL) {
        fprintf(stderr, "small-objects: realloc(%zu) failed\n", size);
        return 1;
      }
      moved += q != p;
      p = q;
    }
    mix(p[size - 1]);
    free(p);
  }
  fprintf(stderr, "small-objects: realloc-same-moved %ld\n", moved);
  return 0;
}

static long number(const char* text) {
  char* end;
  const long n = strtol(text, &end, 10);
  if (*text == '\0' || *end != '\0' || n < 1) {
    fprintf(stderr, "small-objects: '%s' is not a positive integer\n", text);
    exit(2);
  }
  return n;
}

// log2 of a power of two from 2 to 2^30.
static unsigned shiftOf(const char* text) {
  const long n = number(text);
  if (n < 2 || n > (1L << 30) || (n & (n - 1)) != 0) {
    fprintf(stderr, "small-objects: '%s' is not a power of two from 2 to 2^30\n", text);
    exit(2);
  }
  return (unsigned)__builtin_ctzl((unsigned long)n);
}

int main(int argc, char** argv) {
  int status = 2;
  if (argc >= 2 && strcmp(argv[1], "churn") == 0 && (argc == 6 || (argc == 7 && strcmp(argv[6], "pool") == 0))) {
    const unsigned low = shiftOf(argv[4]), high = shiftOf(argv[5]);
    if (low < high) status = churn(number(argv[2]), number(argv[3]), low, high, argc == 7);
  } else if (argc == 5 && strcmp(argv[1], "phases") == 0) {
    const unsigned low = shiftOf(argv[3]), high = shiftOf(argv[4]);
    if (low < high) status = phases(number(argv[2]), low, high);
  } else if (argc == 3) {
    if (strcmp(argv[1], "trim") == 0) status = trim(number(argv[2]));
    else if (strcmp(argv[1], "realloc-same") == 0) status = reallocSame(number(argv[2]));
  }
  if (status == 2) {
    fprintf(stderr, "usage: small-objects churn PAIRS SLOTS LOW HIGH [pool] | phases MIB LOW HIGH | trim COUNT | realloc-same COUNT\n");
    return 2;
  }
  printf("%016llx\n", (unsigned long long)checksum);
  return status;
}

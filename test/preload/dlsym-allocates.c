/*
 * A library preloaded after the preload library whose dlsym allocates, as glibc's did before 2.34 (its
 * dlerror state, with calloc): the preload library looks the next allocator up with dlsym at its first
 * allocation, so what dlsym asks for meanwhile must come from the library's bootstrap buffer, and later be
 * read, grown (realloc copies it out) and freed like any block. At exit it prints the usable sizes the blocks
 * had when made (25 and 41 exactly from the bootstrap; glibc rounds them up to 40 and 56) and whether their
 * bytes stayed intact through realloc.
 * Built by test/preload-semantics.test.ts with the system's C compiler (cc -shared); nothing of it enters the library.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kKept = 4 };
static unsigned char* kept[kKept];
static size_t keptBytes[kKept], keptUsable[kKept];
static int count;

void* dlsym(void* handle, const char* name) {
  static void* (*real)(void*, const char*);
  if (count < kKept) {
    const size_t bytes = count % 2 ? 41 : 25;
    unsigned char* p = count % 2 ? calloc(1, bytes) : malloc(bytes);
    if (p) {
      memset(p, 'a' + count, bytes);
      keptUsable[count] = malloc_usable_size(p);
      keptBytes[count] = bytes;
      kept[count++] = p;
    }
  }
  if (!real) real = (void* (*)(void*, const char*))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (!real) real = (void* (*)(void*, const char*))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  /* RTLD_NEXT now counts from this library, after the preload library: the same next allocator */
  return real ? real(handle, name) : NULL;
}

__attribute__((destructor)) static void report(void) {
  int intact = 1;
  fprintf(stderr, "bootstrap blocks: %d, usable sizes when made:", count);
  for (int i = 0; i < count; i++) fprintf(stderr, " %zu", keptUsable[i]);
  for (int i = 0; i < count; i++) {
    unsigned char* grown = realloc(kept[i], 1000);
    for (size_t j = 0; grown && j < keptBytes[i]; j++) intact &= grown[j] == 'a' + i;
    free(grown ? grown : kept[i]);
  }
  void* freed = malloc(25);
  free(freed);
  fprintf(stderr, "; after realloc: %s\n", intact ? "intact" : "CORRUPT");
}

// Which pages of the preload library's code this process has mapped (test/preload.test.ts): after a malloc,
// a free, stdio, each sleep and wait the library interposes (a microsecond each), aligned blocks, a thread, a
// fork, a signal handler, setrlimit and malloc_trim, as a program that never makes the pool. Prints "malloc ADDRESS" (where malloc runs, the
// library's) and one "page ADDRESS" per page of the library's executable mapping present in /proc/self/pagemap.
//   usage: LD_PRELOAD=LIBRARY code-pages LIBRARY
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <poll.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <time.h>
#include <unistd.h>

static void* work(void* argument) {
  free(malloc(1000));
  return argument;
}

static void handler(int signal) { (void)signal; }

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  void* block = malloc(100);
  free(block);
  const struct timespec microsecond = {0, 1000};
  struct timeval tick = {0, 1};
  nanosleep(&microsecond, NULL);
  clock_nanosleep(CLOCK_MONOTONIC, 0, &microsecond, NULL);
  usleep(1);
  sleep(0);
  poll(NULL, 0, 0);
  ppoll(NULL, 0, &microsecond, NULL);
  select(0, NULL, NULL, NULL, &tick);
  pselect(0, NULL, NULL, NULL, &microsecond, NULL);
  const int epoll = epoll_create1(0);
  struct epoll_event event;
  epoll_wait(epoll, &event, 1, 0);
  epoll_pwait(epoll, &event, 1, 0, NULL);
  close(epoll);
  void* aligned = NULL;
  if (posix_memalign(&aligned, 64, 100) == 0) free(aligned);
  free(aligned_alloc(32, 96));
  free(memalign(64, 200));
  pthread_t thread;
  if (pthread_create(&thread, NULL, work, NULL) == 0) pthread_join(thread, NULL);
  const pid_t child = fork();
  if (child == 0) _exit(0);
  if (child > 0) waitpid(child, NULL, 0);
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_handler = handler;
  sigaction(SIGUSR1, &action, NULL);
  struct rlimit files;
  if (getrlimit(RLIMIT_NOFILE, &files) == 0) setrlimit(RLIMIT_NOFILE, &files);
  malloc_trim(0);
  printf("malloc %p\n", dlsym(RTLD_DEFAULT, "malloc"));
  FILE* maps = fopen("/proc/self/maps", "r");
  int pagemap = open("/proc/self/pagemap", O_RDONLY);
  if (!maps || pagemap < 0) return 1;
  const long page = sysconf(_SC_PAGESIZE);
  char line[4096];
  while (fgets(line, sizeof line, maps)) {
    unsigned long start, end;
    char perms[8], file[4096] = "";
    if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %4095s", &start, &end, perms, file) < 3) continue;
    if (strcmp(file, argv[1]) != 0 || perms[2] != 'x') continue;
    for (unsigned long at = start; at < end; at += page) {
      uint64_t entry = 0;
      if (pread(pagemap, &entry, sizeof entry, (at / page) * sizeof entry) == sizeof entry && (entry >> 63)) printf("page %#lx\n", at);
    }
  }
  return 0;
}

/*
 * What a program that goes quiet, or counts its threads, sees: one line of answers a task, so that
 * test/preload-quiet.test.ts can run it with and without the preload library and compare. Each task but
 * single-threads starts by making a thread and joining it, as a program that has used threads has.
 *   quiet idle [S]    64 blocks of 2 MiB written and freed, then no call into the allocator for up to S
 *                     seconds (10): whether the resident memory fell back to within 16 MiB of where it was
 *                     before them
 *   quiet fork-idle   the same in a forked child
 *   quiet threads     the process's threads before any block, while a 1 MiB block is live, and up to 10 s
 *                     after it was freed
 *   quiet single-threads  the same in a program that never made a thread
 *   quiet sleeps CALL  in a program that never made a thread, 64 blocks of 2 MiB written and freed, then one
 *                     sleep of 300 ms (1 s for sleep) by CALL: nanosleep, clock_nanosleep, clock_nanosleep-abs
 *                     (TIMER_ABSTIME), usleep, sleep, select or poll (no descriptors), handler (nanosleep
 *                     inside a SIGALRM handler), or 20 of 50 ms each by short-nanosleeps or short-polls (poll
 *                     on a pipe nothing is written to, timing out): whether
 *                     the resident memory was back within 16 MiB of the start when it woke
 *   quiet waits CALL  in a program that never made a thread, 64 blocks of 2 MiB written and freed, then a wait
 *                     of up to 10 s by CALL (poll, __poll_chk, ppoll, select, pselect, epoll_wait, epoll_pwait)
 *                     on a pipe a forked child writes to after 600 ms: what the wait returned and whether the
 *                     resident memory was back within 16 MiB of the start when it returned; then the same
 *                     blocks again and a wait of 1 s on the pipe with nothing to read: what it returned, whether
 *                     it lasted at least 1 s, and the memory as before; then the same blocks again and a wait
 *                     on the pipe with a byte written before it: what it returned
 *   quiet waits-signal CALL  the blocks written and freed, then an alarm of 1 s set and a wait of up to 10 s by
 *                     CALL on a pipe nothing is written to: whether the alarm ended it (EINTR) within 5 s
 *   quiet unshare     a 1 MiB block live, then unshare(CLONE_NEWUSER), which the kernel refuses to a process
 *                     with more than one thread: what it returned
 *   quiet main-exit   a 1 MiB block live, a thread that returns after 200 ms, and pthread_exit() on the main
 *                     thread: the process ends when that thread does
 *   quiet main-cancel  the same, but a thread cancels the main thread (waiting in pause()) and returns 200 ms
 *                     after
 *   quiet signals     a 1 MiB block live, SIGUSR1 blocked, then sent to the process 100 times: how often
 *                     sigtimedwait took it
 *   quiet fork-thread  a thread the program made forks; the child allocates a 1 MiB block, and its only
 *                     thread returns from its start routine: whether the child ended (within 10 s)
 *   quiet churn [S]   four threads allocate, check and free blocks of 64 KiB-4 MiB with pauses of 0-29 ms
 *                     and now and then fork, for S seconds (10): whether the blocks held their bytes, the
 *                     most threads seen, and, up to 10 s after, the threads and whether the memory went back
 * Polls with open/read/close and nanosleep: no allocation between the frees and the answer.
 * Built by the test with the system's C compiler (cc); nothing of it enters the library.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Resident bytes of process `pid` (0: this one), 0 where /proc cannot say. */
static uint64_t residentBytesOf(pid_t pid) {
  char text[128] = {0}, file[64];
  snprintf(file, sizeof file, "/proc/%d/statm", (int)(pid ? pid : getpid()));
  const int fd = open(file, O_RDONLY);
  if (fd < 0) return 0;
  const ssize_t n = read(fd, text, sizeof text - 1);
  close(fd);
  unsigned long long size = 0, resident = 0;
  if (n <= 0 || sscanf(text, "%llu %llu", &size, &resident) != 2) return 0;
  return resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

static uint64_t residentBytes(void) { return residentBytesOf(0); }

/* Whether process `pid` (0: this one) holds at most 16 MiB more than `before` (its resident bytes at the start):
 * what the blocks written and freed held has gone back. */
static int memoryBack(pid_t pid, uint64_t before) { return residentBytesOf(pid) < before + (16 << 20); }

/* The Threads: line of /proc/self/status. */
static int threadCount(void) {
  char text[4096] = {0};
  const int fd = open("/proc/self/status", O_RDONLY);
  if (fd < 0) return -1;
  const ssize_t n = read(fd, text, sizeof text - 1);
  close(fd);
  const char* line = n > 0 ? strstr(text, "\nThreads:") : NULL;
  return line ? atoi(line + 9) : -1;
}

static void sleepMs(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000};
  while (nanosleep(&t, &t) != 0 && errno == EINTR) {
  }
}

/* 64 blocks of 2 MiB written and freed. Returns 0, or 1 where malloc failed (said on stdout). */
static int writeAndFree(void) {
  enum { kBlocks = 64, kBytes = 2 << 20 };
  void* blocks[kBlocks];
  for (int i = 0; i < kBlocks; i++) {
    blocks[i] = malloc(kBytes);
    if (!blocks[i]) return printf("malloc failed\n"), 1;
    memset(blocks[i], i + 1, kBytes);
  }
  for (int i = 0; i < kBlocks; i++) free(blocks[i]);
  return 0;
}

static int idle(int seconds) {
  const uint64_t before = residentBytes();
  if (writeAndFree() != 0) return 1;
  int back = 0;
  for (int waited = 0; waited < seconds * 1000 && !back; waited += 20) {
    back = memoryBack(0, before);
    if (!back) sleepMs(20);
  }
  printf("resident memory back within 16 MiB of the start while quiet: %s\n", back ? "yes" : "no");
  return 0;
}

static void sleepBy(const char* call) {
  struct timespec t = {0, 300 * 1000000};
  if (!strcmp(call, "nanosleep")) nanosleep(&t, NULL);
  if (!strcmp(call, "clock_nanosleep")) clock_nanosleep(CLOCK_MONOTONIC, 0, &t, NULL);
  if (!strcmp(call, "clock_nanosleep-abs")) {
    struct timespec at;
    clock_gettime(CLOCK_MONOTONIC, &at);
    at.tv_nsec += t.tv_nsec;
    at.tv_sec += at.tv_nsec / 1000000000;
    at.tv_nsec %= 1000000000;
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL);
  }
  if (!strcmp(call, "usleep")) usleep(300 * 1000);
  if (!strcmp(call, "select")) {
    struct timeval tv = {0, 300 * 1000};
    select(0, NULL, NULL, NULL, &tv);
  }
  if (!strcmp(call, "poll")) poll(NULL, 0, 300);
  if (!strcmp(call, "sleep")) sleep(1);
  if (!strcmp(call, "short-nanosleeps")) {
    struct timespec brief = {0, 50 * 1000000};
    for (int i = 0; i < 20; i++) nanosleep(&brief, NULL);
  }
  if (!strcmp(call, "short-polls")) {
    int ends[2];
    if (pipe(ends) != 0) return;
    struct pollfd p = {ends[0], POLLIN, 0};
    for (int i = 0; i < 20; i++) poll(&p, 1, 50);
    close(ends[0]);
    close(ends[1]);
  }
}

static void sleepsInHandler(int signal) {
  (void)signal;
  sleepBy("nanosleep");
}

static int sleeps(const char* call) {
  const uint64_t before = residentBytes();
  if (writeAndFree() != 0) return 1;
  if (!strcmp(call, "handler")) {
    signal(SIGALRM, sleepsInHandler);
    raise(SIGALRM);
  } else {
    sleepBy(call);
  }
  printf("resident memory back within 16 MiB of the start after the sleep: %s\n", memoryBack(0, before) ? "yes" : "no");
  return 0;
}

int __poll_chk(struct pollfd* fds, nfds_t count, int timeout, size_t length); /* glibc's, under _FORTIFY_SOURCE */

static uint64_t nowMs(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

/* A wait by CALL for `fd` to be readable, up to `ms`: 1 when it is (and the call said so), 0 when the wait
 * timed out (and said nothing ready), -1 otherwise. */
static int waitBy(const char* call, int fd, int ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  struct timeval tv = {ms / 1000, (ms % 1000) * 1000L};
  struct pollfd p = {fd, POLLIN, 0};
  int r = -1;
  if (!strcmp(call, "poll")) r = poll(&p, 1, ms);
  if (!strcmp(call, "__poll_chk")) r = __poll_chk(&p, 1, ms, sizeof p);
  if (!strcmp(call, "ppoll")) r = ppoll(&p, 1, &ts, NULL);
  if (r >= 0) return r == 1 && (p.revents & POLLIN) ? 1 : r == 0 && p.revents == 0 ? 0 : -1;
  if (!strcmp(call, "select") || !strcmp(call, "pselect")) {
    fd_set reading;
    FD_ZERO(&reading);
    FD_SET(fd, &reading);
    r = !strcmp(call, "select") ? select(fd + 1, &reading, NULL, NULL, &tv) : pselect(fd + 1, &reading, NULL, NULL, &ts, NULL);
    return r == 1 && FD_ISSET(fd, &reading) ? 1 : r == 0 && !FD_ISSET(fd, &reading) ? 0 : -1;
  }
  if (!strcmp(call, "epoll_wait") || !strcmp(call, "epoll_pwait")) {
    const int epoll = epoll_create1(0);
    struct epoll_event watch = {.events = EPOLLIN, .data.fd = fd}, got = {0};
    if (epoll < 0 || epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &watch) != 0) return -1;
    r = !strcmp(call, "epoll_wait") ? epoll_wait(epoll, &got, 1, ms) : epoll_pwait(epoll, &got, 1, ms, NULL);
    close(epoll);
    return r == 1 && got.data.fd == fd ? 1 : r;
  }
  return -1;
}

/* A wait by CALL on a pipe that a child writes a byte to once this process's resident memory is back within
 * 16 MiB of the start (after the blocks were freed), or after `patienceMs` at most: the byte never comes
 * before memory a wait gave back however late this process gets to its wait; with a patience shorter than the
 * decay period, it comes while the memory is still held. Then a wait that times out, and one on a byte already
 * there. */
static int waits(const char* call, int patienceMs) {
  const uint64_t before = residentBytes();
  int pipeEnds[2];
  if (pipe(pipeEnds) != 0) return perror("pipe"), 1;
  if (writeAndFree() != 0) return 1;
  const pid_t writer = fork();
  if (writer < 0) return perror("fork"), 1;
  if (writer == 0) {
    const pid_t waiter = getppid();
    for (int waited = 0; waited < patienceMs && !memoryBack(waiter, before); waited += 10) sleepMs(10);
    _exit(write(pipeEnds[1], "x", 1) == 1 ? 0 : 1);
  }
  const int ready = waitBy(call, pipeEnds[0], 10000);
  const int back = memoryBack(0, before);
  char byte;
  if (read(pipeEnds[0], &byte, 1) != 1 || waitpid(writer, NULL, 0) != writer) return printf("no byte\n"), 1;
  printf("ready: %d; resident memory back within 16 MiB of the start: %s\n", ready, back ? "yes" : "no");
  if (writeAndFree() != 0) return 1;
  const uint64_t start = nowMs();
  const int none = waitBy(call, pipeEnds[0], 1000);
  const int lasted = nowMs() - start >= 1000;
  printf("timed out: %d; after 1 s at least: %s; resident memory back: %s\n", none, lasted ? "yes" : "no",
         memoryBack(0, before) ? "yes" : "no");
  if (write(pipeEnds[1], "x", 1) != 1 || writeAndFree() != 0) return 1;
  printf("a byte there before the wait: %d\n", waitBy(call, pipeEnds[0], 10000));
  return 0;
}

static volatile sig_atomic_t alarmed;
static void onAlarm(int signal) {
  (void)signal;
  alarmed = 1;
}

/* A wait of up to 10 s by CALL on a pipe nothing is written to, after the blocks were freed, and an alarm of
 * 1 s set just before it (its handler installed without SA_RESTART): the alarm must end the wait. */
static int waitsSignal(const char* call) {
  int pipeEnds[2];
  if (pipe(pipeEnds) != 0) return perror("pipe"), 1;
  if (writeAndFree() != 0) return 1;
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_handler = onAlarm;
  sigaction(SIGALRM, &action, NULL);
  const uint64_t start = nowMs();
  alarm(1);
  const int ready = waitBy(call, pipeEnds[0], 10000);
  const int interrupted = ready == -1 && errno == EINTR;
  printf("ended by the alarm (EINTR) within 5 s: %s; handler ran: %s\n", interrupted && nowMs() - start < 5000 ? "yes" : "no",
         alarmed ? "yes" : "no");
  return 0;
}

static int forkIdle(int seconds) {
  const pid_t child = fork();
  if (child < 0) return perror("fork"), 1;
  if (child == 0) _exit(idle(seconds));
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

static int threads(void) {
  const int start = threadCount();
  char* volatile block = malloc(1 << 20);
  memset(block, 1, 1 << 20);
  sleepMs(100);
  const int live = threadCount();
  free(block);
  int after = threadCount();
  for (int waited = 0; waited < 10000 && after != start; waited += 20) {
    sleepMs(20);
    after = threadCount();
  }
  printf("threads at start: %d; after the block was freed: %d\n", start, after);
  printf("threads while the block was live: %d\n", live);
  return 0;
}

static int unshareUser(void) {
  char* volatile block = malloc(1 << 20);
  memset(block, 1, 1 << 20);
  sleepMs(100);
  const int result = unshare(CLONE_NEWUSER);
  printf("unshare(CLONE_NEWUSER): %s\n", result == 0 ? "0" : strerror(errno));
  free(block);
  return 0;
}

static void* briefly(void* unused) {
  (void)unused;
  sleepMs(200);
  return NULL;
}


static int mainExit(void) {
  char* volatile block = malloc(1 << 20);
  memset(block, 1, 1 << 20);
  pthread_t t;
  if (pthread_create(&t, NULL, briefly, NULL) != 0) return printf("pthread_create failed\n"), 1;
  printf("main thread exiting\n");
  pthread_exit(NULL);
}

static pthread_t mainThread;

static void* cancelsMain(void* unused) {
  (void)unused;
  pthread_cancel(mainThread);
  sleepMs(200);
  return NULL;
}

static int mainCancel(void) {
  char* volatile block = malloc(1 << 20);
  memset(block, 1, 1 << 20);
  mainThread = pthread_self();
  printf("main thread waiting\n");
  fflush(stdout);
  pthread_t t;
  if (pthread_create(&t, NULL, cancelsMain, NULL) != 0) return printf("pthread_create failed\n"), 1;
  for (;;) pause();
}

/* A thread the program made forks; the child, which the pool serves a block, ends as its only thread returns
 * from its start routine (glibc then ends the process: it was the last thread). */
static void* forkingThread(void* unused) {
  (void)unused;
  const pid_t child = fork();
  if (child == 0) {
    char* volatile block = malloc(1 << 20);
    memset(block, 1, 1 << 20);
    sleepMs(100);
    return NULL;
  }
  int ended = 0, status = 0;
  for (int waited = 0; waited < 10000 && !ended; waited += 20) {
    ended = waitpid(child, &status, WNOHANG) == child;
    if (!ended) sleepMs(20);
  }
  if (!ended) {
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
  }
  printf("a child forked from a thread ends as that thread returns: %s\n", ended && WIFEXITED(status) ? "yes" : "no");
  return NULL;
}

static int forkThread(void) {
  pthread_t t;
  if (pthread_create(&t, NULL, forkingThread, NULL) != 0) return printf("pthread_create failed\n"), 1;
  pthread_join(t, NULL);
  return 0;
}

/* A program that blocks a signal on its threads and takes it with sigtimedwait (or a signalfd): a thread that
 * left it unblocked would take it instead, and its default action end the process. */
static int signals(void) {
  char* volatile block = malloc(1 << 20);
  memset(block, 1, 1 << 20);
  sleepMs(100);
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  sigprocmask(SIG_BLOCK, &usr1, NULL);
  const struct timespec timeout = {5, 0};
  int taken = 0;
  for (int i = 0; i < 100; i++) {
    kill(getpid(), SIGUSR1);
    if (sigtimedwait(&usr1, NULL, &timeout) == SIGUSR1) taken++;
  }
  printf("SIGUSR1 taken by sigtimedwait %d times of 100\n", taken);
  free(block);
  return 0;
}

/* Four threads allocate 1-16 blocks of 64 KiB-4 MiB, check and free them, sleep 0-29 ms, and now and then
 * fork a child that allocates: the library's thread starts, parks, wakes and ends again and again. */
static volatile int churnStop = 0, churnBad = 0, churnThreads = 0;

static void* churnWorker(void* arg) {
  unsigned seed = (unsigned)(uintptr_t)arg;
  while (!churnStop) {
    void* blocks[16];
    const int n = 1 + rand_r(&seed) % 16;
    for (int i = 0; i < n; i++) {
      const size_t size = (64 << 10) + rand_r(&seed) % (4 << 20);
      unsigned char* p = blocks[i] = malloc(size);
      if (!p) {
        churnBad++;
        blocks[i] = NULL;
        continue;
      }
      memset(p, i + 1, size);
      if (p[0] != i + 1 || p[size - 1] != i + 1) churnBad++;
    }
    for (int i = 0; i < n; i++) free(blocks[i]);
    const int threads = threadCount();
    if (threads > churnThreads) churnThreads = threads;
    sleepMs(rand_r(&seed) % 30);
    if (rand_r(&seed) % 50 == 0) {
      const pid_t child = fork();
      if (child == 0) {
        char* q = malloc(1 << 20);
        if (q) memset(q, 1, 1 << 20);
        free(q);
        _exit(q ? 0 : 1);
      }
      int status = 0;
      if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) churnBad++;
    }
  }
  return NULL;
}

static int churn(int seconds) {
  const uint64_t before = residentBytes();
  pthread_t workers[4];
  for (int i = 0; i < 4; i++) {
    if (pthread_create(&workers[i], NULL, churnWorker, (void*)(uintptr_t)(i + 1)) != 0) return printf("pthread_create failed\n"), 1;
  }
  sleepMs(seconds * 1000L);
  churnStop = 1;
  for (int i = 0; i < 4; i++) pthread_join(workers[i], NULL);
  int back = 0, after = threadCount();
  for (int waited = 0; waited < 10000 && (!back || after != 1); waited += 20) {
    back = memoryBack(0, before);
    after = threadCount();
    if (!back || after != 1) sleepMs(20);
  }
  printf("blocks intact: %s; threads at most: %d; after: %d; resident memory back: %s\n", churnBad ? "no" : "yes", churnThreads, after,
         back ? "yes" : "no");
  return 0;
}

int main(int argc, char** argv) {
  const char* what = argc > 1 ? argv[1] : "";
  setvbuf(stdout, NULL, _IONBF, 0);
  if (!strcmp(what, "single-threads")) return threads();
  if (!strcmp(what, "sleeps")) return sleeps(argc > 2 ? argv[2] : "nanosleep");
  if (!strcmp(what, "waits")) return waits(argc > 2 ? argv[2] : "poll", argc > 3 ? atoi(argv[3]) : 8000);
  if (!strcmp(what, "waits-signal")) return waitsSignal(argc > 2 ? argv[2] : "poll");
  pthread_t made;
  if (pthread_create(&made, NULL, briefly, NULL) != 0 || pthread_join(made, NULL) != 0) return printf("no thread\n"), 1;
  const int seconds = argc > 2 ? atoi(argv[2]) : 10;
  if (!strcmp(what, "idle")) return idle(seconds);
  if (!strcmp(what, "fork-idle")) return forkIdle(seconds);
  if (!strcmp(what, "threads")) return threads();
  if (!strcmp(what, "unshare")) return unshareUser();
  if (!strcmp(what, "main-exit")) return mainExit();
  if (!strcmp(what, "main-cancel")) return mainCancel();
  if (!strcmp(what, "signals")) return signals();
  if (!strcmp(what, "fork-thread")) return forkThread();
  if (!strcmp(what, "churn")) return churn(seconds);
  fprintf(stderr, "usage: quiet idle [S]|fork-idle [S]|threads|single-threads|sleeps CALL|waits CALL [PATIENCE_MS]|waits-signal CALL|unshare|main-exit|main-cancel|signals|fork-thread|churn [S]\n");
  return 2;
}

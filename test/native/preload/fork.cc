// fork() in front of the preload library (run with it in LD_PRELOAD, as ctest does), the two cases glibc's
// own tests found hanging:
//   stdio   one thread holds a FILE's lock and reallocs (through the pool) under it, as getline does;
//           another flushes every stream (fflush(NULL): the stream list's lock, then each FILE's); a third
//           forks. fork() must take the stream list's lock before the pool's (glibc bug 19431), or the
//           three wait on each other (glibc's tst-malloc-fork-deadlock).
//   signal  one thread allocates, frees and forks while a timer's signal handler forks (glibc's
//           tst-mallocfork2): a fork that interrupted the pool, or another fork, on the same thread must
//           not wait on the lock that thread holds.
// Each case runs in a child of this program, which is killed if it is not done within its deadline: a
// hang fails the test (exit 1, "hangs"), it does not hang it.
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "preload/process_api.h"

namespace {

constexpr size_t kPoolBytes = 256 << 10;  // above the default threshold: served by the pool
constexpr int kSeconds = 2;               // each case's work
constexpr int kDeadline = 30;             // each case's deadline (a hang), seconds

bool running(const timespec& start) {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return now.tv_sec - start.tv_sec < kSeconds;
}

// Reaps a forked child; false when it did not exit with 0.
bool reaped(pid_t pid) {
  int status;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return false;
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int stdioCase() {
  FILE* stream = fopen("/dev/null", "w");
  if (!stream) return perror("fopen /dev/null"), 1;
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::thread reader([&] {  // getline's pattern: the FILE locked, its buffer grown by realloc
    void* buffer = nullptr;
    for (size_t round = 0; !stop.load(); ++round) {
      flockfile(stream);
      void* grown = realloc(buffer, kPoolBytes + (round % 16) * 4096);
      if (grown) buffer = grown; else failures++;
      funlockfile(stream);
      free(buffer);
      buffer = nullptr;
    }
  });
  std::thread flusher([&] {
    while (!stop.load()) fflush(nullptr);
  });
  timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  while (running(start)) {
    const pid_t pid = fork();
    if (pid == 0) {
      void* p = malloc(kPoolBytes);  // the child's pool is usable
      free(p);
      _exit(p ? 0 : 1);
    }
    if (pid < 0 || !reaped(pid)) failures++;
  }
  stop = true;
  reader.join();
  flusher.join();
  fclose(stream);
  return failures.load() == 0 ? 0 : 1;
}

std::atomic<int> signalFailures{0};
std::atomic<int> forks{0};
std::atomic<bool> timing{false};

// The timer's next signal, 200 us from now: counted from the end of the last handler, not on a fixed beat, so
// that on a loaded machine (a fork and its reaping taking longer than the beat) the signals still leave the
// program time to allocate and fork between them, rather than one handler following the other.
void armTimer() {
  const itimerval once{{0, 0}, {0, 200}};
  setitimer(ITIMER_REAL, &once, nullptr);
}

void forkOnSignal(int) {
  const int saved = errno;
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  if (pid < 0 || !reaped(pid)) signalFailures++;
  forks++;
  if (timing.load()) armTimer();
  errno = saved;
}

int signalCase() {
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_handler = forkOnSignal;
  action.sa_flags = SA_RESTART;
  sigaction(SIGALRM, &action, nullptr);
  timing = true;
  armTimer();
  timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (size_t round = 0; running(start); ++round) {
    void* p = malloc(kPoolBytes + (round % 64) * 4096);
    if (!p) signalFailures++;
    free(p);
    if (round % 8 == 0) {  // and forks itself, so that the signal's fork also interrupts a fork
      const pid_t pid = fork();
      if (pid == 0) _exit(0);
      if (pid < 0 || !reaped(pid)) signalFailures++;
    }
  }
  timing = false;
  const itimerval off{};
  setitimer(ITIMER_REAL, &off, nullptr);
  if (forks.load() == 0) return fprintf(stderr, "fork: the timer never fired\n"), 1;
  return signalFailures.load() == 0 ? 0 : 1;
}

// Runs `body` in a child; true when it exits with 0 before the deadline.
bool passes(const char* name, int (*body)()) {
  const pid_t pid = fork();
  if (pid == 0) _exit(body());
  for (int waited = 0; waited < kDeadline * 10; ++waited) {
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      printf("fork: %s: %s\n", name, ok ? "ok" : "failed");
      return ok;
    }
    usleep(100000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  printf("fork: %s: hangs (killed after %d s)\n", name, kDeadline);
  return false;
}

}  // namespace

int main() {
  using Api = const tp::preload::ProcessPoolApi* (*)();
  Api find = reinterpret_cast<Api>(dlsym(RTLD_DEFAULT, "tensorpool_process_pool"));
  const tp::preload::ProcessPoolApi* api = find ? find() : nullptr;
  if (!api || api->minBytes > kPoolBytes) {
    fprintf(stderr, "fork: the preload library is not loaded, or its threshold is above %zu bytes\n", kPoolBytes);
    return 2;
  }
  const bool stdio = passes("a fork while threads hold stdio's locks and realloc", stdioCase);
  const bool signal = passes("a fork from a signal handler that interrupted malloc", signalCase);
  return stdio && signal ? 0 : 1;
}

// Sleeps of a program with one thread, interposed so that decay gets the turn it would get while the program
// sleeps. A process with threads has decay's own thread for that (decay_thread.h); one without gets none, as a
// first thread would turn glibc's single-threaded paths off for good, and its freed memory waited for its next
// call into the allocator: a Python script that freed 400 MB and slept held them while glibc held 13 MB.
// Before such a program sleeps for at least the decay period, what decay would give back meanwhile goes back
// (Pool::quietFor); after, it faults in again what it uses, as under glibc, which had unmapped it at free().
// nanosleep, clock_nanosleep (relative or absolute), sleep and usleep (glibc's sleep and usleep call its
// nanosleep internally, not through this one), and select and poll given no file descriptor to wait on, the
// sleep of older Pythons' time.sleep and of Perl's four-argument select. Not a select, poll or epoll_wait that
// waits on descriptors: an event loop waits there between requests, and would fault its memory in again for
// each. Not from a signal handler (sleep is async-signal-safe, and a handler that interrupted glibc's malloc,
// which takes no lock in a single-threaded process, must not re-enter it through the pool's bookkeeping): a
// thread that blocks a signal it has a handler for may be in one.
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/select.h>
#include <sys/single_threaded.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>

#include "next_symbol.h"
#include "process_pool.h"

namespace {

using tp::preload::nextSymbol;

using NanosleepFn = int (*)(const struct timespec*, struct timespec*);
using ClockNanosleepFn = int (*)(clockid_t, int, const struct timespec*, struct timespec*);
using SleepFn = unsigned int (*)(unsigned int);
using UsleepFn = int (*)(useconds_t);
using SelectFn = int (*)(int, fd_set*, fd_set*, fd_set*, struct timeval*);
using PollFn = int (*)(struct pollfd*, nfds_t, int);

// Found at load, outside any signal handler (a sleep may run in one; dlsym is not async-signal-safe), and
// again at a call that comes before (another library's constructor sleeping). Constructors run in link order:
// this file is last in native/sources.json, so that process_pool.cc's has found the next allocator before this
// dlsym runs (a dlsym that allocates, glibc's before 2.34, then allocates from it, not from the bootstrap).
NanosleepFn realNanosleep;
ClockNanosleepFn realClockNanosleep;
SleepFn realSleep;
UsleepFn realUsleep;
SelectFn realSelect;
PollFn realPoll;

__attribute__((constructor)) void findSleeps() {
  realNanosleep = nextSymbol<NanosleepFn>("nanosleep");
  realClockNanosleep = nextSymbol<ClockNanosleepFn>("clock_nanosleep");
  realSleep = nextSymbol<SleepFn>("sleep");
  realUsleep = nextSymbol<UsleepFn>("usleep");
  realSelect = nextSymbol<SelectFn>("select");
  realPoll = nextSymbol<PollFn>("poll");
}

template <typename Fn>
Fn found(Fn* slot) {
  if (__builtin_expect(*slot == nullptr, 0)) findSleeps();
  return *slot;
}

constexpr uint64_t kNsPerSecond = 1000000000;
// Shorter sleeps are left alone before the process pool is asked (decay's thread ticks no faster either).
constexpr uint64_t kQuietFrom = 10 * 1000000;

uint64_t nanosecondsOf(const struct timespec& t) {
  if (t.tv_sec < 0 || t.tv_nsec < 0 || t.tv_nsec >= static_cast<long>(kNsPerSecond)) return 0;
  const uint64_t seconds = static_cast<uint64_t>(t.tv_sec);
  return seconds > UINT64_MAX / kNsPerSecond - 1 ? UINT64_MAX : seconds * kNsPerSecond + static_cast<uint64_t>(t.tv_nsec);
}

// Whether this thread may be running a signal handler: it blocks a signal whose handler is installed (the
// kernel blocks a signal while its handler runs, SA_NODEFER aside). A program that blocks such a signal for
// other reasons (sigwait) is left alone too.
bool mayBeInHandler() {
  sigset_t blocked;
  if (pthread_sigmask(SIG_BLOCK, nullptr, &blocked) != 0) return true;
  for (int signal = 1; signal < NSIG; ++signal) {
    if (sigismember(&blocked, signal) != 1) continue;
    // The kernel's struct sigaction starts with the handler; the rest (flags, restorer, mask) fits in 64 bytes.
    alignas(8) unsigned char action[64] = {};
    if (syscall(SYS_rt_sigaction, signal, nullptr, action, sizeof(uint64_t)) != 0) continue;
    void* handler;
    __builtin_memcpy(&handler, action, sizeof handler);
    if (handler != reinterpret_cast<void*>(SIG_DFL) && handler != reinterpret_cast<void*>(SIG_IGN)) return true;
  }
  return false;
}

void beforeSleep(uint64_t ns) {
  if (!__libc_single_threaded || ns < kQuietFrom) return;
  const int saved = errno;
  if (!mayBeInHandler()) tp::preload::poolQuietFor(ns);
  errno = saved;
}

}  // namespace

#define TP_EXPORT extern "C" __attribute__((visibility("default")))

TP_EXPORT int nanosleep(const struct timespec* request, struct timespec* remaining) {
  if (request) beforeSleep(nanosecondsOf(*request));
  return found(&realNanosleep)(request, remaining);
}

TP_EXPORT int clock_nanosleep(clockid_t clock, int flags, const struct timespec* request, struct timespec* remaining) {
  if (request && __libc_single_threaded) {
    uint64_t ns = nanosecondsOf(*request);
    struct timespec now;
    if (flags & TIMER_ABSTIME) {
      const uint64_t at = clock_gettime(clock, &now) == 0 ? nanosecondsOf(now) : UINT64_MAX;
      ns = ns > at ? ns - at : 0;
    }
    beforeSleep(ns);
  }
  return found(&realClockNanosleep)(clock, flags, request, remaining);
}

TP_EXPORT unsigned int sleep(unsigned int seconds) {
  beforeSleep(seconds * kNsPerSecond);
  return found(&realSleep)(seconds);
}

TP_EXPORT int usleep(useconds_t microseconds) {
  beforeSleep(uint64_t{microseconds} * 1000);
  return found(&realUsleep)(microseconds);
}

TP_EXPORT int select(int descriptors, fd_set* reading, fd_set* writing, fd_set* excepting, struct timeval* timeout) {
  const bool none = descriptors == 0 || (!reading && !writing && !excepting);
  if (none && timeout && timeout->tv_usec >= 0 && timeout->tv_usec < 1000000) {
    beforeSleep(nanosecondsOf({timeout->tv_sec, static_cast<long>(timeout->tv_usec) * 1000}));
  }
  return found(&realSelect)(descriptors, reading, writing, excepting, timeout);
}

TP_EXPORT int poll(struct pollfd* descriptors, nfds_t count, int timeoutMs) {
  if (count == 0 && timeoutMs > 0) beforeSleep(static_cast<uint64_t>(timeoutMs) * 1000000);
  return found(&realPoll)(descriptors, count, timeoutMs);
}

// Sleeps and waits of a program with one thread, interposed so that decay gets the turn it would get while the
// program is quiet. A process with threads has decay's own thread for that (decay_thread.h); one without gets
// none, as a first thread would turn glibc's single-threaded paths off for good, and its freed memory would wait for
// its next call into the allocator, where glibc would have unmapped or trimmed it at free().
// Sleeps: before such a program sleeps for at least the decay period, what decay would give back meanwhile goes
// back (Pool::quietFor); after, it faults in again what it uses, as under glibc, which had unmapped it at free().
// nanosleep, clock_nanosleep (relative or absolute), sleep and usleep (glibc's sleep and usleep call its
// nanosleep internally, not through this one), and select and poll given no file descriptor to wait on, the
// sleep of older Pythons' time.sleep and of Perl's four-argument select.
// Waits on descriptors (poll, ppoll, select, pselect, epoll_wait, epoll_pwait: a server with one thread between
// requests, Python's selectors and asyncio): such a wait may end at once, so it is not a sleep; one that may
// outlast the decay period, while the pool holds idle memory, waits for the period first, and only if nothing
// came gives decay its turn and waits for the rest. An event loop busy with requests never waits that long, so
// never faults its memory in again for them; an idle one gives it back as decay's thread would.
// After: every sleep, and every wait that timed out, of 10 ms or more gives decay the turn its thread would have
// had (a loop of short sleeps, or socketserver's poll every 0.5 s, is quiet for periods it never sleeps whole).
// Not from a signal handler (sleep is async-signal-safe, and a handler that interrupted glibc's malloc, which
// takes no lock in a single-threaded process, must not re-enter it through the pool's bookkeeping): a thread
// that blocks a signal it has a handler for may be in one.
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/single_threaded.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>
#include <cstdint>
#include <cstring>

#include "always_run.h"
#include "core/pool.h"
#include "next_symbol.h"
#include "process_pool.h"
#include "sleep_calls.h"

namespace {

using tp::preload::nextSymbol;

using NanosleepFn = int (*)(const struct timespec*, struct timespec*);
using ClockNanosleepFn = int (*)(clockid_t, int, const struct timespec*, struct timespec*);
using SleepFn = unsigned int (*)(unsigned int);
using UsleepFn = int (*)(useconds_t);
using SelectFn = int (*)(int, fd_set*, fd_set*, fd_set*, struct timeval*);
using PollFn = int (*)(struct pollfd*, nfds_t, int);
using PollChkFn = int (*)(struct pollfd*, nfds_t, int, size_t);
using PpollFn = int (*)(struct pollfd*, nfds_t, const struct timespec*, const sigset_t*);
using PselectFn = int (*)(int, fd_set*, fd_set*, fd_set*, const struct timespec*, const sigset_t*);
using EpollWaitFn = int (*)(int, struct epoll_event*, int, int);
using EpollPwaitFn = int (*)(int, struct epoll_event*, int, int, const sigset_t*);

// Found at load, outside any signal handler (a sleep may run in one; dlsym is not async-signal-safe), after the
// next allocator (startup.cc: a dlsym that allocates, glibc's before 2.34, then allocates from it, not from the
// bootstrap), and again at a call that comes before (another library's constructor sleeping).
NanosleepFn realNanosleep;
ClockNanosleepFn realClockNanosleep;
SleepFn realSleep;
UsleepFn realUsleep;
SelectFn realSelect;
PollFn realPoll;
PollChkFn realPollChk;
PpollFn realPpoll;
PselectFn realPselect;
EpollWaitFn realEpollWait;
EpollPwaitFn realEpollPwait;

TP_ALWAYS_RUN void findSleeps() {
  realNanosleep = nextSymbol<NanosleepFn>("nanosleep");
  realClockNanosleep = nextSymbol<ClockNanosleepFn>("clock_nanosleep");
  realSleep = nextSymbol<SleepFn>("sleep");
  realUsleep = nextSymbol<UsleepFn>("usleep");
  realSelect = nextSymbol<SelectFn>("select");
  realPoll = nextSymbol<PollFn>("poll");
  realPollChk = nextSymbol<PollChkFn>("__poll_chk");
  realPpoll = nextSymbol<PpollFn>("ppoll");
  realPselect = nextSymbol<PselectFn>("pselect");
  realEpollWait = nextSymbol<EpollWaitFn>("epoll_wait");
  realEpollPwait = nextSymbol<EpollPwaitFn>("epoll_pwait");
}

template <typename Fn>
__attribute__((always_inline)) inline Fn found(Fn* slot) {
  if (__builtin_expect(*slot == nullptr, 0)) findSleeps();
  return *slot;
}

constexpr uint64_t kNsPerSecond = 1000000000;
constexpr uint64_t kNsPerMs = 1000000;
constexpr uint64_t kForever = UINT64_MAX;  // a wait with no timeout
// Shorter sleeps are left alone before the process pool is asked (decay's thread ticks no faster either).
constexpr uint64_t kQuietFrom = 10 * kNsPerMs;

uint64_t nanosecondsOf(const struct timespec& t) {
  if (t.tv_sec < 0 || t.tv_nsec < 0 || t.tv_nsec >= static_cast<long>(kNsPerSecond)) return 0;
  const uint64_t seconds = static_cast<uint64_t>(t.tv_sec);
  return seconds > UINT64_MAX / kNsPerSecond - 1 ? UINT64_MAX : seconds * kNsPerSecond + static_cast<uint64_t>(t.tv_nsec);
}

// Whether this thread may be running a signal handler: it blocks a signal whose handler is installed (the
// kernel blocks a signal while its handler runs, SA_NODEFER aside). A program that blocks such a signal for
// other reasons (sigwait) is left alone too.
// `blocked`: the thread's signal mask.
bool mayBeInHandler(const sigset_t& blocked) {
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

bool mayBeInHandler() {
  sigset_t blocked;
  return pthread_sigmask(SIG_BLOCK, nullptr, &blocked) != 0 || mayBeInHandler(blocked);
}

void beforeSleep(uint64_t ns) {
  if (!__libc_single_threaded || ns < kQuietFrom) return;
  const int saved = errno;
  if (!mayBeInHandler()) tp::preload::poolQuietFor(ns);
  errno = saved;
}

// A sleep, or a wait that timed out, of at least kQuietFrom has ended: the program made no call meanwhile, so
// decay takes the turn its thread would have taken (what has been idle for the period goes back). A loop of
// short sleeps, or of waits that time out (socketserver's poll every 0.5 s), never sleeps for a whole period
// but is quiet for many.
void afterQuiet() {
  if (!__libc_single_threaded) return;
  const int saved = errno;
  if (!mayBeInHandler()) {
    for (int turn = 0; turn < 64 && tp::preload::poolDecayTick() == tp::DecayWatch::Due; ++turn) {
    }
  }
  errno = saved;
}

template <typename Result>
Result afterSleep(Result result, uint64_t ns) {
  if (ns >= kQuietFrom) afterQuiet();
  return result;
}

// What a wait on descriptors of up to `timeoutNs` returned: 0 (it timed out), decay's turn as after a sleep.
int afterWait(int ready, uint64_t timeoutNs) {
  if (ready == 0 && timeoutNs >= kQuietFrom) afterQuiet();
  return ready;
}

// Idle memory a wait on descriptors is split for: less stays until the program's next call (glibc keeps up to
// 128 KiB at the top of its heap, and raises that bound as it goes, to 32 MiB).
constexpr uint64_t kWorthSplitting = 1 << 20;

// A wait on descriptors of up to `timeoutNs` (kForever: none): how long it waits first, before decay's turn
// (the quiet period, Pool::quietPeriodNs), or 0 where it is left whole (threads, a short wait, less than
// kWorthSplitting idle, decay off). The period is asked for on every long wait: it doubles where memory given
// back is used again.
uint64_t firstPartOf(uint64_t timeoutNs) {
  if (!__libc_single_threaded || timeoutNs < kQuietFrom) return 0;
  const int saved = errno;
  const uint64_t period = tp::preload::poolQuietPeriodNs(kWorthSplitting);
  errno = saved;
  return period >= kQuietFrom && period <= timeoutNs && period != kForever ? period : 0;
}

uint64_t monotonicNs() {
  struct timespec now;
  return clock_gettime(CLOCK_MONOTONIC, &now) == 0 ? nanosecondsOf(now) : 0;
}

// The wait, in two parts: `first` nanoseconds, then, if nothing came (0), decay's turn and the rest of
// `timeoutNs` (kForever: no end). `wait(ns, mask)` makes the real call (the p-form: ppoll, epoll_pwait,
// pselect) for `ns` (kForever: none) with the signal mask `mask` while it waits, and returns what it returned;
// `mask` is the program's (ppoll's, epoll_pwait's or pselect's own), or nullptr: the thread's. Every signal
// stays blocked outside the two parts, and each part unblocks the program's atomically: a signal that comes
// while decay has its turn stays pending and interrupts the second part at once (EINTR), as it would have the
// wait had it been whole, rather than being taken between two calls and missed by the program. Blocking only
// once the first part has timed out leaves a window, and it is hit: a program that sets a timer of 1 s and
// waits (test_selectors: an alarm whose handler raises must end a select() of 30 s) has its signal arrive with
// the end of a first part of 1 s. Before all that, the wait is made once with no timeout: an event loop busy
// with requests finds one ready and pays no more than that call. A signal that comes between that call and
// the blocking of signals is taken before the wait, as one that came just before the program's call would
// have been: nothing has been waited for yet. Pre: first = firstPartOf(timeoutNs) != 0.
template <typename Wait>
int waitInTwo(uint64_t first, uint64_t timeoutNs, const sigset_t* mask, Wait wait) {
  const int now = wait(0, mask);
  if (now != 0) return now;  // ready, or a signal or an error at once: as the whole wait would have returned
  sigset_t all, own;
  sigfillset(&all);
  if (pthread_sigmask(SIG_SETMASK, &all, &own) != 0) return wait(timeoutNs, mask);  // whole, as asked
  const sigset_t* during = mask ? mask : &own;
  const uint64_t start = timeoutNs == kForever ? 0 : monotonicNs();
  int ready = wait(first, during);
  if (ready == 0) {  // else a descriptor, a signal (EINTR) or an error: the caller's, as it would have been
    const int saved = errno;
    if (!mayBeInHandler(own)) tp::preload::poolQuietFor(first);
    errno = saved;
    const uint64_t spent = timeoutNs == kForever ? 0 : monotonicNs() - start;
    ready = wait(timeoutNs == kForever ? kForever : spent < timeoutNs ? timeoutNs - spent : 0, during);
  }
  const int saved = errno;
  pthread_sigmask(SIG_SETMASK, &own, nullptr);
  errno = saved;
  return ready;
}

// Milliseconds (poll, epoll_wait): negative, no timeout.
uint64_t nanosecondsOfMs(int ms) { return ms < 0 ? kForever : static_cast<uint64_t>(ms) * kNsPerMs; }
int msOf(uint64_t ns) {
  if (ns == kForever) return -1;
  const uint64_t ms = ns / kNsPerMs + (ns % kNsPerMs != 0);  // rounded up: a wait never ends early
  return ms > INT_MAX ? INT_MAX : static_cast<int>(ms);
}
struct timespec timespecOf(uint64_t ns) {
  return {static_cast<time_t>(ns / kNsPerSecond), static_cast<long>(ns % kNsPerSecond)};
}
// A timeout given as a timespec (ppoll, pselect): none, kForever; one out of range, 0 (left whole: the real call
// says EINVAL).
uint64_t nanosecondsOfTimeout(const struct timespec* timeout) { return timeout ? nanosecondsOf(*timeout) : kForever; }

// The descriptor sets of a select or pselect, kept so that a wait in two parts hands the second the sets the
// program gave (a timed-out part clears them). Pre: the sets hold no descriptor beyond FD_SETSIZE (a program's
// own larger arrays are left whole).
struct DescriptorSets {
  fd_set* sets[3];
  fd_set copies[3];
  DescriptorSets(fd_set* reading, fd_set* writing, fd_set* excepting) : sets{reading, writing, excepting} {
    for (int i = 0; i < 3; ++i) {
      if (sets[i]) std::memcpy(&copies[i], sets[i], sizeof(fd_set));
    }
  }
  void restore() const {
    for (int i = 0; i < 3; ++i) {
      if (sets[i]) std::memcpy(sets[i], &copies[i], sizeof(fd_set));
    }
  }
};

// The parts of a wait in two (waitInTwo's `wait`), each through the real p-call.
auto pollFor(struct pollfd* descriptors, nfds_t count) {
  return [=](uint64_t ns, const sigset_t* mask) {
    const struct timespec part = timespecOf(ns);
    return found(&realPpoll)(descriptors, count, ns == kForever ? nullptr : &part, mask);
  };
}
auto epollFor(int epoll, struct epoll_event* events, int most) {
  return [=](uint64_t ns, const sigset_t* mask) { return found(&realEpollPwait)(epoll, events, most, msOf(ns), mask); };
}
auto selectFor(int descriptors, const DescriptorSets& sets) {
  return [descriptors, &sets](uint64_t ns, const sigset_t* mask) {
    sets.restore();
    const struct timespec part = timespecOf(ns);
    return found(&realPselect)(descriptors, sets.sets[0], sets.sets[1], sets.sets[2], ns == kForever ? nullptr : &part, mask);
  };
}

// A wait on descriptors of up to `timeoutNs` (kForever: none) with the signal mask `mask` (nullptr: the
// thread's): `whole()` makes the call as the program made it; `part` is its p-form for waitInTwo.
template <typename Part, typename Whole>
int waitOn(uint64_t timeoutNs, const sigset_t* mask, Part part, Whole whole) {
  const uint64_t first = firstPartOf(timeoutNs);
  return afterWait(first == 0 ? whole() : waitInTwo(first, timeoutNs, mask, part), timeoutNs);
}

}  // namespace

namespace tp::preload::quiet {

TP_ALWAYS_RUN void findNextSleeps() { findSleeps(); }

namespace {

// The calls once the pool is made: decay's turns (sleep_calls.h).

int nanosleepWithPool(const struct timespec* request, struct timespec* remaining) {
  const uint64_t ns = request ? nanosecondsOf(*request) : 0;
  beforeSleep(ns);
  return afterSleep(found(&realNanosleep)(request, remaining), ns);
}

int clock_nanosleepWithPool(clockid_t clock, int flags, const struct timespec* request, struct timespec* remaining) {
  uint64_t ns = 0;
  if (request && __libc_single_threaded) {
    ns = nanosecondsOf(*request);
    struct timespec now;
    if (flags & TIMER_ABSTIME) {
      const uint64_t at = clock_gettime(clock, &now) == 0 ? nanosecondsOf(now) : UINT64_MAX;
      ns = ns > at ? ns - at : 0;
    }
    beforeSleep(ns);
  }
  return afterSleep(found(&realClockNanosleep)(clock, flags, request, remaining), ns);
}

unsigned int sleepWithPool(unsigned int seconds) {
  beforeSleep(seconds * kNsPerSecond);
  return afterSleep(found(&realSleep)(seconds), seconds * kNsPerSecond);
}

int usleepWithPool(useconds_t microseconds) {
  beforeSleep(uint64_t{microseconds} * 1000);
  return afterSleep(found(&realUsleep)(microseconds), uint64_t{microseconds} * 1000);
}

int pollWithPool(struct pollfd* descriptors, nfds_t count, int timeoutMs) {
  if (count == 0 && timeoutMs > 0) beforeSleep(static_cast<uint64_t>(timeoutMs) * kNsPerMs);  // leaves nothing idle to split for
  return waitOn(nanosecondsOfMs(timeoutMs), nullptr, pollFor(descriptors, count),
                [&] { return found(&realPoll)(descriptors, count, timeoutMs); });
}

}  // namespace

// poll of a fixed array under _FORTIFY_SOURCE: glibc's checks the array's length, then calls its poll directly.
TP_ALWAYS_RUN int pollChecked(struct pollfd* descriptors, nfds_t count, int timeoutMs, size_t length) {
  if (length / sizeof(struct pollfd) < count) return found(&realPollChk)(descriptors, count, timeoutMs, length);  // fails, as it would have
  return quiet::poll(descriptors, count, timeoutMs);
}

int ppollWithPool(struct pollfd* descriptors, nfds_t count, const struct timespec* timeout, const sigset_t* mask) {
  return waitOn(nanosecondsOfTimeout(timeout), mask, pollFor(descriptors, count),
                [&] { return found(&realPpoll)(descriptors, count, timeout, mask); });
}

int epollWaitWithPool(int epoll, struct epoll_event* events, int most, int timeoutMs) {
  return waitOn(nanosecondsOfMs(timeoutMs), nullptr, epollFor(epoll, events, most),
                [&] { return found(&realEpollWait)(epoll, events, most, timeoutMs); });
}

int epollPwaitWithPool(int epoll, struct epoll_event* events, int most, int timeoutMs, const sigset_t* mask) {
  return waitOn(nanosecondsOfMs(timeoutMs), mask, epollFor(epoll, events, most),
                [&] { return found(&realEpollPwait)(epoll, events, most, timeoutMs, mask); });
}

int selectWithPool(int descriptors, fd_set* reading, fd_set* writing, fd_set* excepting, struct timeval* timeout) {
  const SelectFn real = found(&realSelect);
  const bool valid = !timeout || (timeout->tv_sec >= 0 && timeout->tv_usec >= 0 && timeout->tv_usec < 1000000);
  const uint64_t timeoutNs = !timeout ? kForever : valid ? nanosecondsOf({timeout->tv_sec, static_cast<long>(timeout->tv_usec) * 1000}) : 0;
  const bool none = descriptors == 0 || (!reading && !writing && !excepting);
  if (none) {
    if (timeout && valid) beforeSleep(timeoutNs);
    return afterWait(real(descriptors, reading, writing, excepting, timeout), timeoutNs);
  }
  const uint64_t first = descriptors >= 0 && descriptors <= FD_SETSIZE ? firstPartOf(timeoutNs) : 0;
  if (first == 0) return afterWait(real(descriptors, reading, writing, excepting, timeout), timeoutNs);
  const DescriptorSets sets(reading, writing, excepting);
  const uint64_t start = timeout ? monotonicNs() : 0;
  const int ready = waitInTwo(first, timeoutNs, nullptr, selectFor(descriptors, sets));
  if (timeout) {  // Linux's select leaves the time not waited there
    const uint64_t spent = monotonicNs() - start;
    const uint64_t left = spent < timeoutNs ? timeoutNs - spent : 0;
    timeout->tv_sec = static_cast<time_t>(left / kNsPerSecond);
    timeout->tv_usec = static_cast<suseconds_t>(left % kNsPerSecond / 1000);
  }
  return afterWait(ready, timeoutNs);
}

int pselectWithPool(int descriptors, fd_set* reading, fd_set* writing, fd_set* excepting, const struct timespec* timeout,
                      const sigset_t* mask) {
  const PselectFn real = found(&realPselect);
  const uint64_t timeoutNs = nanosecondsOfTimeout(timeout);
  const uint64_t first = descriptors >= 0 && descriptors <= FD_SETSIZE ? firstPartOf(timeoutNs) : 0;
  if (first == 0) return afterWait(real(descriptors, reading, writing, excepting, timeout, mask), timeoutNs);
  const DescriptorSets sets(reading, writing, excepting);
  return afterWait(waitInTwo(first, timeoutNs, mask, selectFor(descriptors, sets)), timeoutNs);
}

// Until the pool is made there is nothing for decay to give back: each call is the C library's, made from the
// always-run code (always_run.h), so that a program that sleeps or waits but never makes the pool maps none of
// the rest of the library's code.
TP_ALWAYS_RUN int nanosleep(const struct timespec* request, struct timespec* remaining) {
  return __builtin_expect(!madePool(), 1) ? found(&realNanosleep)(request, remaining) : nanosleepWithPool(request, remaining);
}
TP_ALWAYS_RUN int clock_nanosleep(clockid_t clock, int flags, const struct timespec* request, struct timespec* remaining) {
  return __builtin_expect(!madePool(), 1) ? found(&realClockNanosleep)(clock, flags, request, remaining)
                                          : clock_nanosleepWithPool(clock, flags, request, remaining);
}
TP_ALWAYS_RUN unsigned int sleep(unsigned int seconds) {
  return __builtin_expect(!madePool(), 1) ? found(&realSleep)(seconds) : sleepWithPool(seconds);
}
TP_ALWAYS_RUN int usleep(useconds_t microseconds) {
  return __builtin_expect(!madePool(), 1) ? found(&realUsleep)(microseconds) : usleepWithPool(microseconds);
}
TP_ALWAYS_RUN int poll(struct pollfd* descriptors, nfds_t count, int timeoutMs) {
  return __builtin_expect(!madePool(), 1) ? found(&realPoll)(descriptors, count, timeoutMs) : pollWithPool(descriptors, count, timeoutMs);
}
TP_ALWAYS_RUN int ppoll(struct pollfd* descriptors, nfds_t count, const struct timespec* timeout, const sigset_t* mask) {
  return __builtin_expect(!madePool(), 1) ? found(&realPpoll)(descriptors, count, timeout, mask) : ppollWithPool(descriptors, count, timeout, mask);
}
TP_ALWAYS_RUN int epollWait(int epoll, struct epoll_event* events, int most, int timeoutMs) {
  return __builtin_expect(!madePool(), 1) ? found(&realEpollWait)(epoll, events, most, timeoutMs) : epollWaitWithPool(epoll, events, most, timeoutMs);
}
TP_ALWAYS_RUN int epollPwait(int epoll, struct epoll_event* events, int most, int timeoutMs, const sigset_t* mask) {
  return __builtin_expect(!madePool(), 1) ? found(&realEpollPwait)(epoll, events, most, timeoutMs, mask)
                                          : epollPwaitWithPool(epoll, events, most, timeoutMs, mask);
}
TP_ALWAYS_RUN int select(int descriptors, fd_set* reading, fd_set* writing, fd_set* excepting, struct timeval* timeout) {
  return __builtin_expect(!madePool(), 1) ? found(&realSelect)(descriptors, reading, writing, excepting, timeout)
                                          : selectWithPool(descriptors, reading, writing, excepting, timeout);
}
TP_ALWAYS_RUN int pselect(int descriptors, fd_set* reading, fd_set* writing, fd_set* excepting, const struct timespec* timeout,
                          const sigset_t* mask) {
  return __builtin_expect(!madePool(), 1) ? found(&realPselect)(descriptors, reading, writing, excepting, timeout, mask)
                                          : pselectWithPool(descriptors, reading, writing, excepting, timeout, mask);
}

}  // namespace tp::preload::quiet

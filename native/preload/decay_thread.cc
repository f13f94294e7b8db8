#include "decay_thread.h"

#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>

#include "core/pool.h"
#include "always_run.h"
#include "process_pool.h"

namespace tp::preload {

std::atomic<uint8_t> detail::decayThreadState{detail::kThreadOff};
std::atomic<uint32_t> detail::decayThreadWord{detail::kTicking};

namespace {
using namespace detail;

// Starting, ending and holding the thread, and its id: never taken on the allocation and release paths, only
// where the thread is missing (after an allocation) or goes (its own end, a hold).
pthread_mutex_t control = PTHREAD_MUTEX_INITIALIZER;
pthread_t thread;          // while the state is kThreadRunning, kThreadEnded (to be joined) or kThreadHeld (joined)
unsigned holds = 0;        // holdDecayThread() calls not yet resumed
unsigned failedStarts = 0;  // pthread_create refused (EAGAIN under a thread limit, EPERM under seccomp)
constexpr unsigned kMostFailedStarts = 3;
uint64_t tickNs = 500000000;  // half the decay period, 10 ms to 1 s
constexpr uint64_t kDueNs = 1000000;  // between two steps of a purge larger than one (64 MiB, ~1 ms of madvise)

long futex(std::atomic<uint32_t>* word, int op, uint32_t value, const struct timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op | FUTEX_PRIVATE_FLAG, value, timeout, nullptr, 0);
}

// Sleeps while the word holds `expected`, for `ns` at most (0: no timeout), or until woken.
void waitWhile(uint32_t expected, uint64_t ns) {
  const struct timespec timeout = {static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  const int saved = errno;
  futex(&decayThreadWord, FUTEX_WAIT, expected, ns ? &timeout : nullptr);
  errno = saved;
}

bool watching(DecayWatch found) { return found != DecayWatch::Nothing && found != DecayWatch::Off; }

// Nothing left to watch: the thread ends, unless an allocation came meanwhile. It says so (kThreadEnded)
// before it looks again, under the pool's lock: an allocation after that look starts a new thread, one before
// it is seen. Returns whether the thread goes on.
bool goesOn() {
  pthread_mutex_lock(&control);
  if (decayThreadState.load(std::memory_order_relaxed) != kThreadRunning) {  // held: the holder joins it
    pthread_mutex_unlock(&control);
    return false;
  }
  decayThreadState.store(kThreadEnded, std::memory_order_seq_cst);
  const DecayWatch found = poolDecayTick();
  if (watching(found)) {
    decayThreadState.store(kThreadRunning, std::memory_order_relaxed);
  } else if (found == DecayWatch::Off) {
    decayThreadState.store(kThreadOff, std::memory_order_relaxed);  // for good: nobody joins it
    pthread_detach(pthread_self());
  }
  pthread_mutex_unlock(&control);
  return watching(found);
}

void* run(void*) {
  pthread_setname_np(pthread_self(), "tensorpool");  // (of this thread: a prctl, no file opened)
  for (;;) {
    // Parked before it looks: a release after the look sees it parked and wakes it (decayThreadAfterRelease).
    uint32_t seen = decayThreadWord.load(std::memory_order_seq_cst);
    do {
      if (seen == kStopping) return nullptr;
    } while (!decayThreadWord.compare_exchange_weak(seen, kParked, std::memory_order_seq_cst));
    std::atomic_thread_fence(std::memory_order_seq_cst);
    const DecayWatch found = poolDecayTick();
    if (found == DecayWatch::Live) {
      waitWhile(kParked, 0);
      continue;
    }
    uint32_t parked = kParked;
    if (!decayThreadWord.compare_exchange_strong(parked, kTicking, std::memory_order_seq_cst) && parked == kStopping) return nullptr;
    if (found == DecayWatch::Due) waitWhile(kTicking, kDueNs);  // the lock let go between steps
    else if (watching(found)) waitWhile(kTicking, tickNs);
    else if (!goesOn()) return nullptr;
  }
}

// Pre: control held, no thread (kNoThread).
void startLocked() {
  decayThreadState.store(kThreadStarting, std::memory_order_relaxed);  // allocations pthread_create makes skip
  decayThreadWord.store(kTicking, std::memory_order_relaxed);
  // A tick needs little stack; the default is RLIMIT_STACK's 8 MiB, charged to the process where overcommit is
  // strict. Where static TLS does not fit in that (glibc takes it from the stack: EINVAL), the default.
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 << 10);
  // Every signal blocked, in the thread from its first instruction: the program's handlers run on its own threads.
  sigset_t all, before;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &before);
  const int saved = errno;
  int error = pthread_create(&thread, &attr, run, nullptr);
  if (error == EINVAL) error = pthread_create(&thread, nullptr, run, nullptr);
  errno = saved;
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  pthread_attr_destroy(&attr);
  if (error == 0) {
    decayThreadState.store(kThreadRunning, std::memory_order_release);
    return;
  }
  // (The thread's memory goes back at the program's next call instead, as before the thread existed.)
  decayThreadState.store(++failedStarts < kMostFailedStarts ? kNoThread : kThreadOff, std::memory_order_release);
}

}  // namespace

TP_ALWAYS_RUN void configureDecayThread(bool on, uint64_t decayMs) {
  tickNs = std::clamp<uint64_t>(decayMs == PoolOptions::kNoDecay ? 0 : decayMs / 2, 10, 1000) * 1000000;
  decayThreadState.store(on && decayMs != PoolOptions::kNoDecay ? kNoThread : kThreadOff, std::memory_order_release);
}

void detail::startDecayThread() {
  pthread_mutex_lock(&control);
  const uint8_t state = decayThreadState.load(std::memory_order_relaxed);
  if (state == kThreadEnded) pthread_join(thread, nullptr);  // gone already: this returns at once
  if (state == kThreadEnded || state == kNoThread) startLocked();
  pthread_mutex_unlock(&control);
}

void detail::wakeDecayThread() {
  uint32_t parked = kParked;
  if (decayThreadWord.compare_exchange_strong(parked, kTicking, std::memory_order_seq_cst)) futex(&decayThreadWord, FUTEX_WAKE, 1, nullptr);
}

TP_ALWAYS_RUN void decayThreadInChild(bool fromMain) {
  // The child's only thread: no lock is contended, and whoever held `control` in the parent is not here.
  control = PTHREAD_MUTEX_INITIALIZER;
  holds = 0;
  decayThreadWord.store(kTicking, std::memory_order_relaxed);
  const uint8_t state = decayThreadState.load(std::memory_order_relaxed);
  if (state != kThreadOff) decayThreadState.store(fromMain ? kNoThread : kThreadOff, std::memory_order_relaxed);
}

bool holdDecayThread() {
  pthread_mutex_lock(&control);
  const uint8_t state = decayThreadState.load(std::memory_order_relaxed);
  const bool running = state == kThreadRunning, ended = state == kThreadEnded;
  if (state != kThreadOff) {
    ++holds;
    decayThreadState.store(kThreadHeld, std::memory_order_relaxed);
  }
  if (running) {
    decayThreadWord.store(kStopping, std::memory_order_seq_cst);
    futex(&decayThreadWord, FUTEX_WAKE, 1, nullptr);
  }
  const pthread_t gone = thread;
  pthread_mutex_unlock(&control);
  // Outside `control`: the thread may be taking it to end (goesOn), and then sees itself held.
  if (running || ended) pthread_join(gone, nullptr);
  return running || ended;
}

void resumeDecayThread() {
  pthread_mutex_lock(&control);
  if (decayThreadState.load(std::memory_order_relaxed) == kThreadHeld && holds > 0 && --holds == 0) {
    decayThreadState.store(kNoThread, std::memory_order_release);  // the next allocation starts one where needed
  }
  pthread_mutex_unlock(&control);
}

}  // namespace tp::preload

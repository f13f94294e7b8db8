// Calls whose outcome depends on the threads a process has, interposed so that decay's thread
// (decay_thread.h) changes nothing the program sees:
// - unshare() of a user namespace (or of CLONE_VM, CLONE_SIGHAND, CLONE_THREAD), and setns() into a user,
//   mount or time namespace: the kernel refuses them (EINVAL) to a process with more than one thread. A
//   program that makes them while it has one thread (`unshare -U`, a sandbox's set-up, glibc's test harness)
//   would fail for a thread it did not make. Decay's thread ends first and may start again after.
// - pthread_exit() on the main thread, and pthread_cancel() of it: the process then lives as long as any thread
//   does, and decay's thread, waiting for the program's next free(), would keep it alive once the program's
//   threads are done. It ends for good. (A main thread that ends some other way, a raw exit system call, is
//   not seen.)
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "always_run.h"
#include "decay_thread.h"
#include "thread_calls.h"
#include "next_symbol.h"

namespace {

using tp::preload::nextSymbol;

// Where the call is refused to a process with threads.
bool needsOneThread(int unshareFlags) { return unshareFlags & (CLONE_NEWUSER | CLONE_VM | CLONE_SIGHAND | CLONE_THREAD); }
bool setnsNeedsOneThread(int nstype) { return nstype == 0 || (nstype & (CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWTIME)); }

// `call` with decay's thread ended. pthread_join returns once the thread has cleared its id, before the kernel
// has taken it out of the thread group: EINVAL meanwhile is retried, for 200 ms at most.
template <typename Call>
int withOneThread(Call call) {
  const bool ended = tp::preload::holdDecayThread();
  int result = call();
  const struct timespec ms = {0, 1000000};
  for (int tries = 0; ended && result == -1 && errno == EINVAL && tries < 200; ++tries) {
    nanosleep(&ms, nullptr);
    result = call();
  }
  const int saved = errno;
  tp::preload::resumeDecayThread();
  errno = saved;
  return result;
}

// The main thread's id, taken where the library is loaded: on the main thread, as LD_PRELOAD loads it (a fork's
// child keeps its parent's: the thread that forked keeps its id, and a child forked by another thread never
// starts decay's thread). Unset (knownMain false) where something else loaded the library on another thread.
pthread_t mainThread;
bool knownMain = false;

}  // namespace

namespace tp::preload::threads {

TP_ALWAYS_RUN void noteMainThread() {
  if (syscall(SYS_gettid) != getpid()) return;
  mainThread = pthread_self();
  knownMain = true;
}

int unshare(int flags) {
  static const auto real = nextSymbol<int (*)(int)>("unshare");
  if (!needsOneThread(flags)) return real(flags);
  return withOneThread([&] { return real(flags); });
}

int setns(int fd, int nstype) {
  static const auto real = nextSymbol<int (*)(int, int)>("setns");
  if (!setnsNeedsOneThread(nstype)) return real(fd, nstype);
  return withOneThread([&] { return real(fd, nstype); });
}

void exitThread(void* value) {
  static const auto real = nextSymbol<void (*)(void*)>("pthread_exit");
  if (syscall(SYS_gettid) == getpid()) tp::preload::holdDecayThread();  // never resumed
  real(value);
  __builtin_unreachable();
}

// The main thread ends at its next cancellation point (or never, where it disables cancellation: decay's thread
// is then gone for nothing worse than memory given back only at calls, as before it existed).
int cancelThread(pthread_t thread) {
  static const auto real = nextSymbol<int (*)(pthread_t)>("pthread_cancel");
  if (knownMain && pthread_equal(thread, mainThread)) tp::preload::holdDecayThread();  // never resumed
  return real(thread);
}

}  // namespace tp::preload::threads

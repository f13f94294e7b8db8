#include "fork.h"

#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

#include "decay_thread.h"
#include "process_pool.h"
#include "this_process.h"
#include "always_run.h"

// libio's stream-list lock (exported by glibc since 2.2.5; fork() itself takes it).
extern "C" {
void _IO_list_lock(void);
void _IO_list_unlock(void);
void _IO_list_resetlock(void);
}

namespace tp::preload {

namespace {

// Whether each fork in progress on this thread took the pool's locks, one bit a fork, the innermost in bit 0:
// a fork from a signal handler may interrupt another fork of the same thread (glibc's tst-mallocfork2).
thread_local uint64_t poolHeldBits __attribute__((tls_model("initial-exec"))) = 0;

// pthread_atfork's prepare handlers run before fork() takes stdio's stream-list lock, and so before glibc's
// arena locks. Taking the pool's lock there inverted glibc's order (glibc bug 19431): a thread in getline
// holds a FILE's lock and waits on the pool in realloc, fflush(NULL) holds the list lock and waits on that
// FILE, and fork, holding the pool, waits on the list. The list lock is taken first here, as glibc's fork
// does before its own arenas' locks (it is recursive: fork takes it again, and in the child resets it).
//
// A fork from a signal handler that interrupted this thread inside the pool, or inside another fork that
// holds the pool's locks, would wait on a lock the thread holds itself. It takes none then, as glibc's fork
// takes no malloc lock in a single-threaded process: the child returns into the interrupted call, which
// finishes its change and unlocks. (With other threads inside the pool too, such a fork is unsafe under
// glibc as well: fork is not async-signal-safe once a process has threads.) The thread counts as inside the
// pool from here until fork returns, so that its own allocations meanwhile go to the C library.
//
// Signals are blocked from here until fork returns (the mask restored in parent and child): a signal whose
// handler forks, landing while this thread is halfway into the stream-list lock (the lock word taken, its
// owner not yet written), would wait on that lock forever (seen in test/native/preload/fork.cc).
thread_local sigset_t maskBeforeFork __attribute__((tls_model("initial-exec")));

// Whether the thread forking is the process's main thread. The child's only thread is the one that forked:
// where that is a thread the program made, it ends by returning from its start routine, and a process whose
// last thread ends so ends only if no other thread lives (glibc counts its threads); with decay's thread
// beside it, the child would live on (CPython's test_threading forks from a thread so). Such a child gets no
// decay thread.
thread_local bool forkingFromMain __attribute__((tls_model("initial-exec"))) = false;

TP_ALWAYS_RUN void prepare() {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &maskBeforeFork);
  forkingFromMain = syscall(SYS_gettid) == getpid();
  const bool held = !insidePool();
  enterPool();
  poolHeldBits = poolHeldBits << 1 | (held ? 1 : 0);
  _IO_list_lock();
  if (held) lockPoolForFork();
}

// The innermost fork's bit, removed.
TP_ALWAYS_RUN bool heldByThisFork() {
  const bool held = poolHeldBits & 1;
  poolHeldBits >>= 1;
  return held;
}

TP_ALWAYS_RUN void parent() {
  if (heldByThisFork()) unlockPoolAfterFork(false);
  _IO_list_unlock();
  leavePool();
  pthread_sigmask(SIG_SETMASK, &maskBeforeFork, nullptr);
}

TP_ALWAYS_RUN void child() {
  if (heldByThisFork()) unlockPoolAfterFork(true);
  _IO_list_resetlock();  // the child's only thread; glibc's fork has reset it already when the parent had threads
  poolForkedChild();
  decayThreadInChild(forkingFromMain);
  leavePool();
  pthread_sigmask(SIG_SETMASK, &maskBeforeFork, nullptr);
}

}  // namespace

TP_ALWAYS_RUN void holdPoolAcrossFork() { __register_atfork(prepare, parent, child, __dso_handle); }  // pthread_atfork (always_run.h)

}  // namespace tp::preload

#include "fork.h"

#include <pthread.h>

#include "process_pool.h"

// libio's stream-list lock (exported by glibc since 2.2.5; fork() itself takes it).
extern "C" {
void _IO_list_lock(void);
void _IO_list_unlock(void);
void _IO_list_resetlock(void);
}

namespace tp::preload {

namespace {

// Whether the fork in progress took the pool's locks. fork() runs its handlers under its own lock, so one
// fork at a time reads and writes this.
bool poolHeld = false;

// pthread_atfork's prepare handlers run before fork() takes stdio's stream-list lock, and so before glibc's
// arena locks. Taking the pool's lock there inverted glibc's order (glibc bug 19431): a thread in getline
// holds a FILE's lock and waits on the pool in realloc, fflush(NULL) holds the list lock and waits on that
// FILE, and fork, holding the pool, waits on the list. The list lock is taken first here, as glibc's fork
// does before its own arenas' locks (it is recursive: fork takes it again, and in the child resets it).
//
// A fork from a signal handler that interrupted this thread inside the pool would wait on a lock the
// thread holds itself. It takes none then, as glibc's fork takes no malloc lock in a single-threaded
// process: the child returns into the interrupted call, which finishes its change and unlocks. (With
// other threads inside the pool too, such a fork is unsafe under glibc as well: fork is not
// async-signal-safe once a process has threads.)
void prepare() {
  _IO_list_lock();
  poolHeld = !insidePool();
  if (poolHeld) lockPoolForFork();
}

void parent() {
  if (poolHeld) unlockPoolAfterFork();
  _IO_list_unlock();
}

void child() {
  if (poolHeld) unlockPoolAfterFork();
  _IO_list_resetlock();  // the child's only thread; glibc's fork has reset it already when the parent had threads
}

}  // namespace

void holdPoolAcrossFork() { pthread_atfork(prepare, parent, child); }

}  // namespace tp::preload

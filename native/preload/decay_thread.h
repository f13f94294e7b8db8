// Decay's own thread. A program that frees the pool's blocks and then goes quiet (a service between requests,
// a script that sleeps or waits on input) makes no call that gives decay its turn, and would keep its idle
// memory until its next allocation, where glibc unmaps or trims at free(). This thread gives decay its turn
// (Pool::decayTick) while the pool holds memory it may give back.
//
// It exists only in a process that has made threads of its own (one that never has keeps glibc's
// single-threaded paths: decayThreadAfterAlloc; its sleeps give decay its turn instead, sleep_calls.cc), and
// only while the serving arena holds something: live blocks, or free memory decay may give back.
// - Started after an allocation the pool served, where there is none (never from free(): glibc calls free()
//   with the lock pthread_create takes held, as it frees a finished thread's TLS).
// - While only live blocks are held it waits on a futex with no timeout: the next release wakes it.
// - While idle memory is held it ticks every half decay period (10 ms to 1 s).
// - It ends once the arena holds neither; the next allocation starts another.
// Its signals are blocked. A fork()'s child has none until it allocates. unshare() and setns(), which the
// kernel refuses to a process with threads for a user namespace (and setns for a mount or time namespace),
// end it first; a main thread's pthread_exit(), or pthread_cancel() of it, ends it for good, as the process
// would otherwise live on for it (thread_calls.cc).
// None where decay is off (TENSORPOOL_DECAY_MS=off), with TENSORPOOL_DECAY_THREAD=0, or where the serving
// classes do not decay (a plan's).
#pragma once

#include <sys/single_threaded.h>

#include <atomic>
#include <cstdint>

namespace tp::preload {

namespace detail {
enum DecayThreadState : uint8_t { kThreadOff, kNoThread, kThreadStarting, kThreadRunning, kThreadEnded, kThreadHeld };
extern std::atomic<uint8_t> decayThreadState;
// The futex word the thread waits on: kTicking while it runs or sleeps for a tick, kParked while it waits for
// a release, kStopping once asked to end.
enum DecayThreadWord : uint32_t { kTicking = 0, kParked = 1, kStopping = 2 };
extern std::atomic<uint32_t> decayThreadWord;
void startDecayThread();
void wakeDecayThread();
}  // namespace detail

// At load: whether the thread may run, and decay's period (TENSORPOOL_DECAY_MS). Until then there is none.
void configureDecayThread(bool on, uint64_t decayMs);

// After the pool served an allocation: the thread started where there is none. Pre: this thread holds none
// of the pool's locks and is not inside it. One relaxed load where a thread runs.
// Only in a process that has made threads already (__libc_single_threaded): glibc turns its single-threaded
// paths off for good at a process's first thread (malloc without its arena locks, a fork from a signal
// handler that interrupted malloc, libstdc++'s reference counts without atomics), and a first thread of the
// library's would have turned them off under a program that never made one (glibc's tst-mallocfork2 hung).
inline void decayThreadAfterAlloc() {
  const uint8_t state = detail::decayThreadState.load(std::memory_order_relaxed);
  if (__builtin_expect(state == detail::kNoThread || state == detail::kThreadEnded, 0) && !__libc_single_threaded) detail::startDecayThread();
}

// After a release the pool took (applied or queued): the thread woken where it waits for one. The fence pairs
// with the thread's, taken between parking and looking at the pool: either it sees this release, or this
// sees it parked.
inline void decayThreadAfterRelease() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (__builtin_expect(detail::decayThreadWord.load(std::memory_order_relaxed) == detail::kParked, 0)) detail::wakeDecayThread();
}

// fork()'s child: the thread stayed in the parent. `fromMain`: the parent's main thread forked; where another
// did, the child gets none (its only thread ends by returning from its start routine: fork.cc).
void decayThreadInChild(bool fromMain);

// Ends the thread (waiting until pthread_join says it has: the kernel may count it a moment longer) and keeps
// another from starting until resumeDecayThread(): for a call the kernel refuses to a process with more than
// one thread (thread_calls.cc). Calls nest. Returns whether a thread was ended.
bool holdDecayThread();
void resumeDecayThread();

}  // namespace tp::preload

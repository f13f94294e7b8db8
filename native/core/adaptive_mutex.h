// The pool's lock. Its critical sections are short (an allocation or a release: a few hundred ns), so a
// thread that finds it held usually gets it a moment later; std::mutex would put that thread to sleep in the
// kernel and wake it microseconds later. A thread that finds it held spins briefly, then yields its core a
// few times, and only then sleeps (glibc's mutex, which wakes it when the lock is let go).
//
// Why yield: with more runnable threads than cores (16 on 2), the holder has often been preempted, so spinning
// longer only burns the core it needs, and sleeping costs a futex wait here and a wake-up syscall in the
// holder's unlock. A yield hands the core to another runnable thread, often the holder. On the contend bench
// (16 threads, 2 cores, blocks freed by other threads), with free() queued: glibc's adaptive spin alone 1.66x glibc malloc's
// time, spin then yield 1.35x (docs/benchmarks.md).
#pragma once

#include <pthread.h>
#include <sched.h>

namespace tp {

class AdaptiveMutex {
 public:
  AdaptiveMutex() {
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
    pthread_mutex_init(&mutex_, &attr);
    pthread_mutexattr_destroy(&attr);
  }
  ~AdaptiveMutex() { pthread_mutex_destroy(&mutex_); }
  AdaptiveMutex(const AdaptiveMutex&) = delete;
  AdaptiveMutex& operator=(const AdaptiveMutex&) = delete;

  // Lockable, for std::lock_guard and std::unique_lock.
  void lock() {
    if (try_lock()) return;
    for (int i = 0; i < kSpins; ++i) {
      pause();
      if (looksFree() && try_lock()) return;
    }
    for (int i = 0; i < kYields; ++i) {
      sched_yield();
      if (looksFree() && try_lock()) return;
    }
    pthread_mutex_lock(&mutex_);
  }
  bool try_lock() { return pthread_mutex_trylock(&mutex_) == 0; }
  void unlock() { pthread_mutex_unlock(&mutex_); }

 private:
  static void pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }
  static constexpr int kSpins = 50;
  static constexpr int kYields = 8;
  // A read of the lock word, so that spinning threads do not take its cache line from the holder with a
  // locked instruction each try. (Elsewhere than glibc: every try is a try_lock.)
  bool looksFree() const {
#ifdef __GLIBC__
    return __atomic_load_n(&mutex_.__data.__lock, __ATOMIC_RELAXED) == 0;
#else
    return true;
#endif
  }

  pthread_mutex_t mutex_;
};

}  // namespace tp

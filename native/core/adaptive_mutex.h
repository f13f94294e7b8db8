// The pool's lock. Its critical sections are short (an allocation or a release: ~100 ns), so a thread that
// finds it held usually gets it a moment later; std::mutex would put that thread to sleep in the kernel and
// wake it microseconds later. glibc's adaptive mutex spins briefly first, then sleeps as std::mutex does.
#pragma once

#include <pthread.h>

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
  void lock() { pthread_mutex_lock(&mutex_); }
  bool try_lock() { return pthread_mutex_trylock(&mutex_) == 0; }
  void unlock() { pthread_mutex_unlock(&mutex_); }

 private:
  pthread_mutex_t mutex_;
};

}  // namespace tp

// Calls whose outcome depends on the threads a process has (thread_calls.cc says which and why): what the C
// library's do, with decay's thread out of the way. overrides.cc exports them under the C library's names.
#pragma once

#include <pthread.h>

namespace tp::preload::threads {

// At load, on the thread that loads the library (startup.cc): the main thread, noted where it is that one.
void noteMainThread();

int unshare(int flags);
int setns(int fd, int nstype);
[[noreturn]] void exitThread(void* value);  // pthread_exit
int cancelThread(pthread_t thread);         // pthread_cancel

}  // namespace tp::preload::threads

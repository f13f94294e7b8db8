// Sleeps and waits of a program with one thread: what the C library's would do, with decay's turn where the
// program is quiet (sleep_calls.cc says how). overrides.cc exports them under the C library's names.
// Each returns what the C library's call returns, with its errno, and writes what it writes (select's time
// left, the descriptor sets); the decay they give takes no lock the program may hold and changes no errno.
// Until the pool is made each is the C library's call, made from the always-run code (always_run.h).
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <time.h>
#include <unistd.h>

namespace tp::preload::quiet {

// The C library's calls, found at load, outside any signal handler (startup.cc), after the next allocator.
void findNextSleeps();

int nanosleep(const struct timespec* request, struct timespec* remaining);
int clock_nanosleep(clockid_t clock, int flags, const struct timespec* request, struct timespec* remaining);
unsigned int sleep(unsigned int seconds);
int usleep(useconds_t microseconds);
int poll(struct pollfd* descriptors, nfds_t count, int timeoutMs);
// __poll_chk: poll of a fixed array under _FORTIFY_SOURCE (its length checked first).
int pollChecked(struct pollfd* descriptors, nfds_t count, int timeoutMs, size_t length);
int ppoll(struct pollfd* descriptors, nfds_t count, const struct timespec* timeout, const sigset_t* mask);
int epollWait(int epoll, struct epoll_event* events, int most, int timeoutMs);
int epollPwait(int epoll, struct epoll_event* events, int most, int timeoutMs, const sigset_t* mask);
int select(int descriptors, fd_set* reading, fd_set* writing, fd_set* excepting, struct timeval* timeout);
int pselect(int descriptors, fd_set* reading, fd_set* writing, fd_set* excepting, const struct timespec* timeout,
            const sigset_t* mask);

}  // namespace tp::preload::quiet

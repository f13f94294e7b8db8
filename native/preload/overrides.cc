// Every symbol the preload library exports (exports.map lists the same names), in one place, each a line that
// hands the call to the part of the library that does the work, as mimalloc's alloc-override.c does for its
// allocator. What earns each its place (docs/design.md, "the preload library's exports"):
// - the malloc family: the pool serves the requests of at least the threshold, the next allocator the rest;
// - sigaction: a recording written when SIGINT or SIGTERM ends a program, which still sees its own actions;
// - setrlimit, prlimit: the pool's reservation fitted to an address space limit the program lowers itself;
// - unshare, setns, pthread_exit, pthread_cancel: decay's thread out of the way of calls that count threads;
// - sleeps and waits on descriptors: decay's turn while a program with one thread is quiet;
// - _exit, _Exit: the recording of a process that ends without exit() (a forked worker);
// - tensorpool_*: the table the addon reaches the pool through, and an iteration mark for code without it.
// The code every program runs (the malloc family, sigaction) lies with start-up (always_run.h).
#include <malloc.h>
#include <pthread.h>
#include <sys/resource.h>

#include "address_limit.h"
#include "always_run.h"
#include "api_table.h"
#include "exit_calls.h"
#include "malloc_route.h"
#include "signal_flush.h"
#include "sleep_calls.h"
#include "thread_calls.h"

using namespace tp::preload;

#define TP_EXPORT extern "C" __attribute__((visibility("default")))
#define TP_EXPORT_ALWAYS_RUN TP_EXPORT TP_ALWAYS_RUN

// The malloc family (malloc_route.h). malloc and free are what a program calls most: below the threshold
// (detail::fastBelow), malloc is a compare and a jump to the next allocator's (detail::mallocBelow; while the
// pool ticks, through mallocCounted), and free a jump to the next allocator's until a pointer may need a look
// (detail::freeEntry): on x86-64 three instructions and one (docs/design.md, "the hot path"); elsewhere the
// same in C++.
#if defined(__x86_64__)
namespace {
[[gnu::used]] TP_ALWAYS_RUN void* mallocBeyondCompare(size_t bytes) { return route::mallocSlow(bytes); }
}  // namespace
TP_EXPORT_ALWAYS_RUN __attribute__((naked)) void* malloc(size_t) {
  asm("cmp %c[below](%%rip), %%rdi\n\t"
      "jae %c[beyond]\n\t"
      "jmp *%c[next](%%rip)" ::[below] "i"(&detail::fastBelow), [beyond] "i"(&mallocBeyondCompare), [next] "i"(&detail::mallocBelow));
}
#else
TP_EXPORT_ALWAYS_RUN void* malloc(size_t bytes) { return route::malloc(bytes); }
#endif
TP_EXPORT_ALWAYS_RUN void free(void* p) { detail::freeEntry.load(std::memory_order_relaxed)(p); }
// detail::mallocBelow's two other values (process_pool.h).
TP_ALWAYS_RUN void* tp::preload::mallocCounted(size_t bytes) { return route::mallocCounted(bytes); }
TP_ALWAYS_RUN void* tp::preload::mallocThroughNext(size_t bytes) { return next.malloc.load(std::memory_order_relaxed)(bytes); }
TP_EXPORT_ALWAYS_RUN void* calloc(size_t count, size_t size) { return route::calloc(count, size); }
TP_EXPORT_ALWAYS_RUN void* realloc(void* p, size_t bytes) { return route::realloc(p, bytes); }
TP_EXPORT_ALWAYS_RUN void* reallocarray(void* p, size_t count, size_t size) { return route::reallocarray(p, count, size); }
TP_EXPORT_ALWAYS_RUN int posix_memalign(void** out, size_t alignment, size_t bytes) { return route::posixMemalign(out, alignment, bytes); }
TP_EXPORT_ALWAYS_RUN void* aligned_alloc(size_t alignment, size_t bytes) { return route::alignedAlloc(alignment, bytes); }
TP_EXPORT_ALWAYS_RUN void* memalign(size_t alignment, size_t bytes) { return route::memalign(alignment, bytes); }
TP_EXPORT_ALWAYS_RUN void* valloc(size_t bytes) { return route::valloc(bytes); }
TP_EXPORT_ALWAYS_RUN void* pvalloc(size_t bytes) { return route::pvalloc(bytes); }
TP_EXPORT_ALWAYS_RUN size_t malloc_usable_size(void* p) { return route::usableSize(p); }
TP_EXPORT_ALWAYS_RUN int malloc_trim(size_t pad) { return route::trim(pad); }
TP_EXPORT_ALWAYS_RUN struct mallinfo2 mallinfo2(void) { return route::mallinfo2(); }
TP_EXPORT_ALWAYS_RUN struct mallinfo mallinfo(void) { return route::mallinfo(); }
// free() until then straight to the next allocator's (process_pool.h, detail::freeEntry).
TP_ALWAYS_RUN void tp::preload::freeWithChecks(void* p) { route::free(p); }
// Once the pool exists, freeEntry's (os::mayBeTrackedMapping, laid out for the common case; docs/design.md, "the
// hot path"): on x86-64 three instructions to the next allocator's free for a pointer below every tracked
// granule (os::detail::trackedFrom: the C library's brk heap), five for one above them all (trackedTo: glibc's
// thread arenas and mapped chunks), else eleven for one no tracked granule lies near (the folded table's entry
// compared in memory, where the compiler would load it into a register first); freeOutsidePoolAbove, for an
// allocator whose blocks lie above the pool's memory (jemalloc's, in mappings the kernel placed), compares with
// trackedTo first. Once a block was shifted, a pointer aligned to 32 (not null) whose word before it
// carries kShiftTag in its top 16 bits takes route::nextFree, which tells a shifted block from a chunk of
// glibc's (nextStart); any other goes on as above.
#if defined(__x86_64__)
namespace {
[[gnu::used]] TP_ALWAYS_RUN void freeMaybeShifted(void* p) { route::nextFree(p); }
}  // namespace
#define TP_FREE_UNLESS_NEAR_POOL                                                                   \
  "mov %%rdi, %%rax\n\t"                                                                            \
  "shr %[granuleShift], %%rax\n\t"                                                                  \
  "and %[nearMask], %%eax\n\t"                                                                      \
  "lea %c[near](%%rip), %%rdx\n\t"                                                                  \
  "cmpb $0, (%%rdx,%%rax)\n\t"                                                                      \
  "jne %c[checks]\n\t"
#define TP_FREE_OPERANDS                                                                                 \
  [granuleShift] "i"(os::detail::kGranuleShift), [nearMask] "i"(os::detail::kNearEntries - 1),           \
      [near] "i"(&os::detail::trackedNear), [from] "i"(&os::detail::trackedFrom),                        \
      [to] "i"(&os::detail::trackedTo), [checks] "i"(&freeWithChecks), [next] "i"(&next.free)
TP_ALWAYS_RUN __attribute__((naked)) void tp::preload::freeOutsidePool(void*) {
  asm("cmp %c[from](%%rip), %%rdi\n\t"
      "jb 1f\n\t"
      "cmp %c[to](%%rip), %%rdi\n\t"
      "jae 1f\n\t" TP_FREE_UNLESS_NEAR_POOL
      "1:\n\t"
      "jmp *%c[next](%%rip)" ::TP_FREE_OPERANDS);
}
TP_ALWAYS_RUN __attribute__((naked)) void tp::preload::freeOutsidePoolAbove(void*) {
  asm("cmp %c[to](%%rip), %%rdi\n\t"
      "jae 1f\n\t"
      "cmp %c[from](%%rip), %%rdi\n\t"
      "jb 1f\n\t" TP_FREE_UNLESS_NEAR_POOL
      "1:\n\t"
      "jmp *%c[next](%%rip)" ::TP_FREE_OPERANDS);
}
TP_ALWAYS_RUN __attribute__((naked)) void tp::preload::freeOutsidePoolShifted(void*) {
  asm("cmp %c[from](%%rip), %%rdi\n\t"
      "jb 2f\n\t"
      "cmp %c[to](%%rip), %%rdi\n\t"
      "jae 2f\n\t" TP_FREE_UNLESS_NEAR_POOL
      "2:\n\t"
      "test $31, %%dil\n\t"
      "jnz 1f\n\t"
      "test %%rdi, %%rdi\n\t"
      "jz 1f\n\t"
      "cmpw %[tag], -2(%%rdi)\n\t"
      "je %c[shifted]\n"
      "1:\n\t"
      "jmp *%c[next](%%rip)" ::TP_FREE_OPERANDS,
      [tag] "i"(route::kShiftTag >> 48), [shifted] "i"(&freeMaybeShifted));
}
#undef TP_FREE_UNLESS_NEAR_POOL
#undef TP_FREE_OPERANDS
#else
TP_ALWAYS_RUN void tp::preload::freeOutsidePool(void* p) { route::freeOutsidePool<false>(p); }
TP_ALWAYS_RUN void tp::preload::freeOutsidePoolAbove(void* p) { route::freeOutsidePool<false>(p); }
TP_ALWAYS_RUN void tp::preload::freeOutsidePoolShifted(void* p) { route::freeOutsidePool<true>(p); }
#endif
// The library's own C++ runtime (libstdc++, linked in statically) allocates through this (-Wl,--wrap=malloc):
// never from the pool. Local: not exported.
extern "C" TP_ALWAYS_RUN void* __wrap_malloc(size_t bytes) { return route::libraryMalloc(bytes); }

// Signals (signal_flush.h).
TP_EXPORT_ALWAYS_RUN int sigaction(int signal, const struct sigaction* act, struct sigaction* old) {
  return programSigaction(signal, act, old);
}

// Limits (address_limit.h). Defined under other names and exported by symbol (asm labels): <sys/resource.h>
// redirects setrlimit to setrlimit64 (and prlimit to prlimit64) where files are 64-bit, and on 64-bit Linux
// each pair is one function, struct rlimit64 being struct rlimit.
TP_EXPORT int setrlimitThenFit(int resource, const struct rlimit* limit) __asm__("setrlimit");
TP_EXPORT int setrlimit64ThenFit(int resource, const struct rlimit* limit) __asm__("setrlimit64");
TP_EXPORT int prlimitThenFit(pid_t pid, int resource, const struct rlimit* limit, struct rlimit* old) __asm__("prlimit");
TP_EXPORT int prlimit64ThenFit(pid_t pid, int resource, const struct rlimit* limit, struct rlimit* old) __asm__("prlimit64");
TP_ALWAYS_RUN int setrlimitThenFit(int resource, const struct rlimit* limit) { return limitThenFit(0, resource, limit, nullptr); }
TP_ALWAYS_RUN int setrlimit64ThenFit(int resource, const struct rlimit* limit) { return limitThenFit(0, resource, limit, nullptr); }
TP_ALWAYS_RUN int prlimitThenFit(pid_t pid, int resource, const struct rlimit* limit, struct rlimit* old) { return limitThenFit(pid, resource, limit, old); }
TP_ALWAYS_RUN int prlimit64ThenFit(pid_t pid, int resource, const struct rlimit* limit, struct rlimit* old) { return limitThenFit(pid, resource, limit, old); }

// Threads (thread_calls.h).
TP_EXPORT int unshare(int flags) { return threads::unshare(flags); }
TP_EXPORT int setns(int fd, int nstype) { return threads::setns(fd, nstype); }
TP_EXPORT void pthread_exit(void* value) { threads::exitThread(value); }
TP_EXPORT int pthread_cancel(pthread_t thread) { return threads::cancelThread(thread); }

// Sleeps and waits (sleep_calls.h).
TP_EXPORT_ALWAYS_RUN int nanosleep(const struct timespec* request, struct timespec* remaining) { return quiet::nanosleep(request, remaining); }
TP_EXPORT_ALWAYS_RUN int clock_nanosleep(clockid_t clock, int flags, const struct timespec* request, struct timespec* remaining) {
  return quiet::clock_nanosleep(clock, flags, request, remaining);
}
TP_EXPORT_ALWAYS_RUN unsigned int sleep(unsigned int seconds) { return quiet::sleep(seconds); }
TP_EXPORT_ALWAYS_RUN int usleep(useconds_t microseconds) { return quiet::usleep(microseconds); }
TP_EXPORT_ALWAYS_RUN int poll(struct pollfd* descriptors, nfds_t count, int timeoutMs) { return quiet::poll(descriptors, count, timeoutMs); }
TP_EXPORT_ALWAYS_RUN int __poll_chk(struct pollfd* descriptors, nfds_t count, int timeoutMs, size_t length) {
  return quiet::pollChecked(descriptors, count, timeoutMs, length);
}
TP_EXPORT_ALWAYS_RUN int ppoll(struct pollfd* descriptors, nfds_t count, const struct timespec* timeout, const sigset_t* mask) {
  return quiet::ppoll(descriptors, count, timeout, mask);
}
TP_EXPORT_ALWAYS_RUN int epoll_wait(int epoll, struct epoll_event* events, int most, int timeoutMs) { return quiet::epollWait(epoll, events, most, timeoutMs); }
TP_EXPORT_ALWAYS_RUN int epoll_pwait(int epoll, struct epoll_event* events, int most, int timeoutMs, const sigset_t* mask) {
  return quiet::epollPwait(epoll, events, most, timeoutMs, mask);
}
TP_EXPORT_ALWAYS_RUN int select(int descriptors, fd_set* reading, fd_set* writing, fd_set* excepting, struct timeval* timeout) {
  return quiet::select(descriptors, reading, writing, excepting, timeout);
}
TP_EXPORT_ALWAYS_RUN int pselect(int descriptors, fd_set* reading, fd_set* writing, fd_set* excepting, const struct timespec* timeout,
                      const sigset_t* mask) {
  return quiet::pselect(descriptors, reading, writing, excepting, timeout, mask);
}

// Ending without exit() (exit_calls.h).
TP_EXPORT void _exit(int status) { exitWithoutHandlers(status); }
TP_EXPORT void _Exit(int status) { exitWithoutHandlers(status); }

// The C API (api_table.h): the addon finds tensorpool_process_pool with dlsym(RTLD_DEFAULT, ...) and gets null in a
// process that does not preload the library; Python's hook calls tensorpool_mark_iteration through ctypes.
TP_EXPORT const ProcessPoolApi* tensorpool_process_pool(void) { return processPoolApi(); }
TP_EXPORT int tensorpool_mark_iteration(void) { return markIterationFromC(); }

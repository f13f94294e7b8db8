// _exit and _Exit, interposed: a process that ends without exit() runs no atexit handler, and so would leave
// no recording: a forked child ends so (Python's multiprocessing workers call os._exit), as do programs that
// must not flush what their parent's stdio buffered. processEndsAt_exit (process_pool.h) writes it where that
// is safe, then the process ends as the C library's _exit ends it.
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>

#include "next_symbol.h"
#include "process_pool.h"

namespace {

using ExitFn = void (*)(int);
std::atomic<ExitFn> nextExit{nullptr};

// The C library's _exit, found at load (a vfork child must not call dlsym: it would take the loader's lock
// in its parent's memory). Where it was not found, the system call it makes.
[[noreturn]] void endProcess(int status) {
  if (const ExitFn fn = nextExit.load(std::memory_order_acquire)) fn(status);
  for (;;) syscall(SYS_exit_group, status);
}

}  // namespace

namespace tp::preload {
void findNextExit() { nextSymbolOnce(nextExit, "_exit"); }
}  // namespace tp::preload

#define TP_EXPORT extern "C" __attribute__((visibility("default")))

TP_EXPORT [[noreturn]] void _exit(int status) {
  tp::preload::processEndsAt_exit();
  endProcess(status);
}

TP_EXPORT [[noreturn]] void _Exit(int status) {
  tp::preload::processEndsAt_exit();
  endProcess(status);
}

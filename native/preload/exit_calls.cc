// _exit and _Exit: a process that ends without exit() runs no atexit handler, and so would leave no recording:
// a forked child ends so (Python's multiprocessing workers call os._exit), as do programs that must not flush
// what their parent's stdio buffered. processEndsAt_exit (process_pool.h) writes it where that is safe, then
// the process ends as the C library's _exit ends it.
#include "exit_calls.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>

#include "always_run.h"
#include "next_symbol.h"
#include "process_pool.h"
#include "this_process.h"

namespace tp::preload {

namespace {
using ExitFn = void (*)(int);
std::atomic<ExitFn> nextExit{nullptr};
}  // namespace

TP_ALWAYS_RUN void findNextExit() { nextSymbolOnce(nextExit, "_exit"); }

void exitWithoutHandlers(int status) {
  processEndsAt_exit();
  // The C library's _exit, found at load (a vfork child must not call dlsym: it would take the loader's lock
  // in its parent's memory); where it was not found, the system call it makes.
  if (const ExitFn fn = nextExit.load(std::memory_order_acquire)) fn(status);
  for (;;) syscall(SYS_exit_group, status);
}

}  // namespace tp::preload

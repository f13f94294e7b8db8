// setrlimit and prlimit, interposed for RLIMIT_AS alone: a program that lowers its own address space limit
// after start-up (Python's resource.setrlimit, a shell's `ulimit -v`, a sandbox) would find the pool's spare
// reservation (16 GiB of address space, no memory) already over it, and every later mapping refused: the C
// library's heap could not grow, and allocations glibc would serve failed. After the
// C library has set the limit, the pool gives back what it does not fit (process_pool.h). A limit set from
// outside (prlimit --pid) is not seen: the pool keeps its reservation then.
#include <sys/resource.h>
#include <unistd.h>

#include "address_limit.h"
#include "always_run.h"
#include "next_symbol.h"
#include "process_pool.h"

namespace {

using PrlimitFn = int (*)(pid_t, int, const struct rlimit*, struct rlimit*);

// The C library's prlimit (setrlimit is prlimit of this process, the old limit not asked for).
TP_ALWAYS_RUN int cPrlimit(pid_t pid, int resource, const struct rlimit* limit, struct rlimit* old) {
  static std::atomic<PrlimitFn> real{nullptr};
  return tp::preload::nextSymbolOnce(real, "prlimit64")(pid, resource, limit, old);
}

}  // namespace

namespace tp::preload {

TP_ALWAYS_RUN int limitThenFit(pid_t pid, int resource, const struct rlimit* limit, struct rlimit* old) {
  const int result = cPrlimit(pid, resource, limit, old);
  if (result == 0 && resource == RLIMIT_AS && limit && (pid == 0 || pid == getpid())) fitPoolToAddressSpace();
  return result;
}

static_assert(sizeof(struct rlimit) == sizeof(struct rlimit64), "struct rlimit64 is struct rlimit");

}  // namespace tp::preload

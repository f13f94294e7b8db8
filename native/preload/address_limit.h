// setrlimit and prlimit for this process, as the C library's, and then, where RLIMIT_AS was lowered, the pool's
// spare reservation fitted to what the new limit leaves (address_limit.cc says why). overrides.cc exports it
// as setrlimit, setrlimit64, prlimit and prlimit64.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

namespace tp::preload {

// prlimit(pid, resource, limit, old): the C library's answer and errno, unchanged.
int limitThenFit(pid_t pid, int resource, const struct rlimit* limit, struct rlimit* old);

}  // namespace tp::preload

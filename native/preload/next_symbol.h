// The definition a symbol this library interposes would have had without it (the C library's, or whichever
// library comes next in the search order), for the calls that wrap one: thread_calls.cc, sleep_calls.cc,
// signal_flush.cc, address_limit.cc, exit_calls.cc, malloc_route.h.
// Pre: not in a signal handler (dlsym may allocate and takes the loader's lock). Post: nullptr where none exists.
#pragma once

#include <dlfcn.h>

#include <atomic>

namespace tp::preload {

template <typename Fn>
Fn nextSymbol(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

// nextSymbol(name), looked up at the first call and kept in `slot` (threads that race each look it up and
// find the same). Inlined: always-run code (always_run.h) that calls it keeps it in its own section.
template <typename Fn>
__attribute__((always_inline)) inline Fn nextSymbolOnce(std::atomic<Fn>& slot, const char* name) {
  Fn fn = slot.load(std::memory_order_acquire);
  if (!fn) {
    fn = nextSymbol<Fn>(name);
    slot.store(fn, std::memory_order_release);
  }
  return fn;
}

}  // namespace tp::preload

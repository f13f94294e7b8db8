// The definition a symbol this library interposes would have had without it (the C library's, or whichever
// library comes next in the search order), for the calls that wrap one: thread_calls.cc, sleep_calls.cc.
// Pre: not in a signal handler (dlsym may allocate and takes the loader's lock). Post: nullptr where none exists.
#pragma once

#include <dlfcn.h>

namespace tp::preload {

template <typename Fn>
Fn nextSymbol(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

}  // namespace tp::preload

// The library's own operator new and delete (its settings, the pool's bookkeeping), in place of those of
// the C++ runtime it links in statically. They do what libstdc++'s do; they are here so that they lie with
// the code every program runs (always_run.h), where start-up calls them, rather than at the far end of the
// library's code with the rest of libstdc++. Local, as the rest of that runtime is (exports.map): the
// host's operator new, node's or a Python extension's, is never this one.
#include <cstdlib>
#include <new>

#include "always_run.h"

TP_ALWAYS_RUN void* operator new(std::size_t bytes) {
  if (bytes == 0) bytes = 1;
  for (;;) {
    if (void* p = std::malloc(bytes)) return p;  // --wrap=malloc: the library's own allocation (malloc_route.h)
    const std::new_handler handler = std::get_new_handler();
    if (!handler) throw std::bad_alloc();
    handler();
  }
}

TP_ALWAYS_RUN void operator delete(void* p) noexcept { std::free(p); }
TP_ALWAYS_RUN void operator delete(void* p, std::size_t) noexcept { std::free(p); }

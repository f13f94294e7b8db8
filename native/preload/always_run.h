// Where the code every program runs lies in the library's file.
//
// The kernel maps up to 64 KiB of a library's file around each page of it a program touches (fault-around),
// and every page so mapped counts in the program's resident memory. A program that only starts runs a few
// KB of this library (the C library's entries, the next allocator's lookup, start-up and exit); spread over
// all its code they would keep most of it resident (docs/benchmarks.md). Marked TP_ALWAYS_RUN, they share one
// section, which always_run.ld (the link's INSERT script) places at the start of the code, right after the
// PLT, with the start-up code (`.text.startup`, where GCC puts what only constructors call) and the
// runtimes' exit-time destructors, ahead of the rest (GNU ld's default script would start with the cold
// code). Code a program reaches only once the pool is made follows, as always_run.ld's pool path lists it
// (start-up calls none of it: the default classes are built when the pool is made). A function every process runs that is not
// marked can cost a window of its own (docs/benchmarks.md, 'Start-up memory', says how to find them).
// The C library's atexit and pthread_atfork are not in libc.so: a program links a stub of each from
// libc_nonshared.a, which ld places at the end of the code, beside _fini, which the dynamic linker calls at
// exit (DT_FINI). Start-up registers its handlers with the functions those stubs call, and DT_FINI names an
// empty function here (-Wl,-fini=tp_preload_fini: _fini's body is empty on x86-64; the destructors run from
// .fini_array), so that no program touches that last 64 KiB.
#pragma once

#define TP_ALWAYS_RUN __attribute__((section(".text.hot.tensorpool_always_run")))

extern "C" {
extern void* __dso_handle;  // this library's, from the C runtime's crtbeginS.o
int __cxa_atexit(void (*function)(void*), void* argument, void* dso);
int __register_atfork(void (*prepare)(), void (*parent)(), void (*child)(), void* dso);
}

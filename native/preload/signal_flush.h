// The recording written when SIGINT or SIGTERM ends the process with its default action (which runs no
// atexit handler): Ctrl-C, `kill`, and the programs that end themselves by the signal once they have handled
// it (Python after an uncaught KeyboardInterrupt, Node's handler for its terminal's state).
#pragma once

#include <signal.h>

namespace tp::preload {

// The C library's sigaction, found at load, outside any signal handler (startup.cc: dlsym is not
// async-signal-safe).
void findNextSigaction();

// sigaction (overrides.cc exports it): the C library's, but that while a recording is to be written at SIGINT or
// SIGTERM, the program sees and sets its own actions for them, the library's handler standing in for the
// default action (the flush) or around a handler with SA_RESETHAND. Async-signal-safe, as sigaction is.
int programSigaction(int signal, const struct sigaction* act, struct sigaction* old);

// Called once the process pool is made while recording (a process that records nothing keeps its signals'
// dispositions). From now on, wherever SIGINT's or SIGTERM's action is the default one, `flush` runs first (in the signal
// handler, unless the thread was inside the pool), then the process ends by the signal as it would have.
// The program sees its own actions: sigaction (interposed) reports the default action, with the flags and mask
// the program gave it, where this library's stands in for it, a program's handler replaces it, and a program's handler with SA_RESETHAND (Node's)
// gets this library's in place of the default action it is reset to.
void flushOnTerminatingSignals(void (*flush)());

}  // namespace tp::preload

// _exit and _Exit (exit_calls.cc says why they are the library's): overrides.cc exports them.
#pragma once

namespace tp::preload {

// The C library's _exit, found at load, outside any signal handler (startup.cc).
void findNextExit();

// What exit() would do for this process that the library does (its recording, its --stats line), where that
// can be done safely, then the C library's _exit(status).
[[noreturn]] void exitWithoutHandlers(int status);

}  // namespace tp::preload

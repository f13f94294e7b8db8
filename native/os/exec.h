// Replacing this process with another program, as a shell's `exec` does: what `tensorpool run` does once it
// has prepared the command's environment, so that the command keeps the launcher's pid, process group,
// terminal and parent, and its exit status (a signal included) reaches the caller unchanged.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tp::os {

// What the program is to start with beside its arguments and environment: the state the launcher's own
// caller gave it, which a runtime in between (Node resets ignored signals and raises the open-files limit)
// may have changed.
struct ExecState {
  uint64_t ignoredSignals = 0;  // bit n-1 set: signal n is SIG_IGN (every other signal: SIG_DFL)
  uint64_t blockedSignals = 0;  // bit n-1 set: signal n is blocked
  bool setOpenFiles = false;    // whether to set RLIMIT_NOFILE's soft limit to openFilesSoft
  uint64_t openFilesSoft = 0;   // UINT64_MAX: unlimited
  // The caller's descriptors the program inherits: close-on-exec cleared on each (a runtime in between may
  // have set it), and any of 0, 1 and 2 not among them closed (it may have opened /dev/null there).
  std::vector<int> inheritedDescriptors;
};

// Runs `path` in place of this process (execve), `argv` its arguments (argv[0] first), `env` its environment
// ("NAME=value" each), after putting the signals' dispositions, the calling thread's signal mask, the soft
// open-files limit and the descriptors named in `state` as it says. A file the kernel will not run as it is
// (ENOEXEC: a script without #!) is run by /bin/sh, as execvp and shells do.
// Pre:  path names the file to run (no PATH search); argv is not empty.
// Post: returns only on failure: the errno of the execve, with every disposition, the mask and the limit as
//       they were before the call (the descriptors stay as they were set for the program).
// Threads: other threads keep running until the execve ends them; a signal that arrives while the
//       dispositions are the program's acts as it would on the program.
int execProgram(const std::string& path, const std::vector<std::string>& argv, const std::vector<std::string>& env,
                const ExecState& state);

}  // namespace tp::os

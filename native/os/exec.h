// Replacing this process with another program, as a shell's `exec` does: what `tensorpool run` does when it is
// started as `node main.js run` (bin/tensorpool, the usual way, execs the command from its own shell), so that
// the command keeps Node's pid, process group, terminal and parent, and its exit status (a signal included)
// reaches the caller unchanged.
#pragma once

#include <string>
#include <vector>

namespace tp::os {

// Runs `path` in place of this process (execve), `argv` its arguments (argv[0] first), `env` its environment
// ("NAME=value" each), with what a runtime in between changes as it starts put back to a program's defaults:
// every signal's action the default (Node ignores SIGPIPE and SIGXFSZ), the calling thread's mask empty (Node
// blocks SIGUSR1 for its inspector), and descriptors 0, 1 and 2 not closed by the exec. A file the kernel will
// not run as it is (ENOEXEC: a script without #!) is run by /bin/sh, as execvp and shells do.
// Pre:  path names the file to run (no PATH search); argv is not empty.
// Post: returns only on failure: the errno of the execve, with every action and the mask as they were before.
// Threads: other threads keep running until the execve ends them; a signal that arrives while the actions are
//       the program's acts as it would on the program.
int execProgram(const std::string& path, const std::vector<std::string>& argv, const std::vector<std::string>& env);

}  // namespace tp::os

// The name a recording gives its program, and a plan trained on it is matched against.
#pragma once

#include <cstddef>
#include <string>

namespace tp::preload {

// The program of a command line (its arguments NUL-separated, as /proc/self/cmdline holds them): the name
// of the executable (without its directory) and of what it runs: "node app.js", "python3 train.py",
// "python3 -m torch.distributed.run", "node -e" (inline code), or the executable alone when it runs
// nothing named. Node's and Python's options that take a separate value (node --require X, -r X, --import
// X; python -X opt, -W arg) are skipped with it; other executables' first argument that is not an option.
// Printable ASCII only (others become '?', and so do '"', '\' and ','), so that it travels through CSV and
// JSON as is; at most 200 characters.
std::string programName(const char* cmdline, size_t length);

// programName of this process (/proc/self/cmdline); empty when it cannot be read.
std::string thisProgram();

}  // namespace tp::preload

// The file a recording goes to (TENSORPOOL_RECORD): checked when the library loads, written at exit.
#pragma once

#include <cstddef>
#include <string>

namespace tp::preload {

// Whether `path` can take a recording: an existing regular file, or a name in an existing, writable
// directory. A FIFO or a device is refused here (writing to one hung the program before main, or failed
// only at exit). False with *error saying why.
bool recordFileUsable(const std::string& path, std::string* error);

// Writes `text` to `path` through a temporary file in its directory, renamed over it once complete: the
// previous file stays whole until then. Every process of a tree writes to the one file, which keeps the
// largest recording of the run: the file is left as it is when it holds a recording with the same `run`
// line (the header line "# run: <run>") at least as long. Processes that exit together take turns (a
// lock on the directory). Returns false with *error saying why.
bool writeRecordFile(const std::string& path, const std::string& run, const char* text, size_t length, std::string* error);

}  // namespace tp::preload

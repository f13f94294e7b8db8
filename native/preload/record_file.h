// The file a recording goes to (TENSORPOOL_RECORD): checked when the library loads, written at exit.
// Writing takes no memory from any heap, so that it can be done at _exit and when a signal ends the process
// (recording_writer.h).
#pragma once

#include <limits.h>

#include <cstddef>
#include <string>

namespace tp::preload {

// Whether `path` can take a recording: an existing regular file, or a name in an existing, writable
// directory. A FIFO or a device is refused here (writing to one hung the program before main, or failed
// only at exit). False with *error saying why.
bool recordFileUsable(const std::string& path, std::string* error);

// A recording being written: to a temporary file beside its path, renamed over it once complete, so that
// the previous file stays whole until then.
struct RecordFile {
  int fd = -1;
  char path[PATH_MAX] = {};             // the file the name stands for (a symbolic link's target)
  char temporary[PATH_MAX + 32] = {};   // path.tmp.<pid>
};

// Opens the temporary file for `path`. False, with a reason in error[capacity], when it cannot be made.
bool openRecordFile(const char* path, RecordFile* file, char* error, size_t capacity);

// Closes the temporary file and renames it over the path, unless the file there already holds a recording
// of the same `run` (its "# run: <run>" line) at least as long: every process of a tree writes to one file
// (where the name has no %p), which keeps the run's largest recording. A file there from anything else (an
// earlier run's recording) is kept as <path>.old, one generation, so that a run of the wrong command never
// costs the recording before it. Processes that end together take turns (a lock on the directory). The
// temporary file is gone afterwards either way. False, with a reason in error[capacity], when the file could
// not be replaced.
bool commitRecordFile(RecordFile* file, const char* run, char* error, size_t capacity);

// Closes and removes the temporary file of a recording that could not be written whole.
void abandonRecordFile(RecordFile* file);

}  // namespace tp::preload

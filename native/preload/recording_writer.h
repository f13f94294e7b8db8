// The process pool's recording written as a tensorpool trace CSV (`op,id,size,stream`; the allocating
// thread as the stream, 0 the main thread). Called as the process ends: from exit(), from _exit() in a
// forked child (Python's multiprocessing workers end so), and from SIGINT or SIGTERM ending it
// (signal_flush.h). It takes no memory from any heap: the events are copied into a scratch mapping of the OS
// layer's and the text is written through a buffer there, both unmapped before it returns.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tp {
class Pool;
}

namespace tp::preload {

struct RecordingHeader {
  uint64_t minBytes = 0;      // the threshold: requests of at least this many bytes were recorded
  const char* program = "";   // what a plan trained from it serves ("" where unknown)
  const char* run = "";       // the run the recording belongs to (record_file.h keeps each run's largest)
};

// Writes the events `pool` holds (nullptr: a pool never made, an empty recording) to `path`, through a
// temporary file renamed over it (record_file.h). A release whose allocation is not held (recording
// restarted from JS) is left out, with a comment line counting them; blocks live at the end stay unfreed.
// Threads: takes the pool's lock while it copies the events; the caller must not hold it.
// Returns false with a reason in error[capacity] (nothing written, the previous file whole).
bool writeRecording(const Pool* pool, const char* path, const RecordingHeader& header, char* error, size_t capacity);

}  // namespace tp::preload

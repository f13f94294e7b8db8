#include "recording_writer.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>

#include "core/pool.h"
#include "os/os.h"
#include "record_file.h"
#include "text.h"

namespace tp::preload {

namespace {

constexpr size_t kOutputBytes = size_t{64} << 10;

struct AllocThread {
  uint64_t serial;
  uint64_t thread;
};

// One mapping: the events copied out of the pool, the threads of their allocations (by serial, ascending:
// serials are handed out in order, so the allocations' order is theirs), and the output buffer.
struct Scratch {
  void* start = nullptr;
  size_t bytes = 0;
  RecordedEvent* events = nullptr;
  size_t count = 0;
  RecordingState state;
  bool failed = false;
  int error = 0;
};

void copyEvents(const RecordedEvent* events, size_t count, const RecordingState& state, void* context) {
  Scratch& s = *static_cast<Scratch*>(context);
  s.state = state;
  const size_t page = os::pageSize();
  s.bytes = (count * (sizeof(RecordedEvent) + sizeof(AllocThread)) + kOutputBytes + page - 1) / page * page;
  s.start = os::mapMemory(s.bytes, page);
  if (!s.start) {
    s.failed = true;
    s.error = errno;
    return;
  }
  s.events = static_cast<RecordedEvent*>(s.start);
  s.count = count;
  if (count) memcpy(s.events, events, count * sizeof(RecordedEvent));
}

// The text, written to the file in pieces of the output buffer.
class Output {
 public:
  Output(int fd, char* buffer) : fd_(fd), text_(buffer, kOutputBytes) {}
  Text& line() {
    if (text_.size() > kOutputBytes - 256) flush();
    return text_;
  }
  bool flush() {
    for (size_t done = 0; ok_ && done < text_.size();) {
      const ssize_t n = write(fd_, text_.data() + done, text_.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) ok_ = false, error_ = n < 0 ? errno : EIO;
      else done += static_cast<size_t>(n);
    }
    text_.clear();
    return ok_;
  }
  int error() const { return error_; }

 private:
  int fd_;
  Text text_;
  bool ok_ = true;
  int error_ = 0;
};

void writeEvents(Output& out, const Scratch& s, const RecordingHeader& header) {
  out.line().add("# recorded by the tensorpool preload library: requests of ").add(header.minBytes).add(" bytes or more\n");
  if (*header.program) out.line().add("# program: ").add(header.program).add('\n');
  out.line().add("# run: ").add(header.run).add('\n');
  out.line().add("op,id,size,stream\n");
  AllocThread* threads = reinterpret_cast<AllocThread*>(s.events + s.count);
  size_t allocs = 0;
  for (size_t i = 0; i < s.count; ++i) {
    if (s.events[i].op() == RecordedOp::Alloc) threads[allocs++] = {s.events[i].serial, s.events[i].thread()};
  }
  uint64_t unknown = 0;
  for (size_t i = 0; i < s.count; ++i) {
    const RecordedEvent& e = s.events[i];
    switch (e.op()) {
      case RecordedOp::Alloc:
        out.line().add("a,").add(e.serial).add(',').add(e.bytes()).add(',').add(e.thread()).add('\n');
        break;
      case RecordedOp::Release: {
        // The stream of a free is where the block was last used: the thread that allocated it.
        const AllocThread* at = std::lower_bound(threads, threads + allocs, e.serial,
                                                 [](const AllocThread& a, uint64_t serial) { return a.serial < serial; });
        if (at == threads + allocs || at->serial != e.serial) {
          ++unknown;
          break;
        }
        out.line().add("f,").add(e.serial).add(",,").add(at->thread).add('\n');
        break;
      }
      case RecordedOp::Mark:
        out.line().add("i,,,\n");
        break;
    }
  }
  if (unknown) out.line().add("# ").add(unknown).add(" releases of blocks allocated while recording was off are left out\n");
  if (s.state.truncated) out.line().add("# truncated: the event limit was reached\n");
}

}  // namespace

bool writeRecording(const Pool* pool, const char* path, const RecordingHeader& header, char* error, size_t capacity) {
  Scratch s;
  if (pool) {
    pool->visitRecording(0, copyEvents, &s);
  } else {
    copyEvents(nullptr, 0, RecordingState{}, &s);
  }
  if (s.failed) return copyText(error, capacity, strerror(s.error)), false;
  RecordFile file;
  bool ok = openRecordFile(path, &file, error, capacity);
  if (ok) {
    Output out(file.fd, static_cast<char*>(s.start) + s.count * (sizeof(RecordedEvent) + sizeof(AllocThread)));
    writeEvents(out, s, header);
    if (out.flush()) {
      ok = commitRecordFile(&file, header.run, error, capacity);
    } else {
      copyText(error, capacity, strerror(out.error()));
      abandonRecordFile(&file);
      ok = false;
    }
  }
  os::unmapMemory(s.start, s.bytes);
  return ok;
}

}  // namespace tp::preload

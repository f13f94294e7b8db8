#include "this_process.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>

#include "always_run.h"
#include "options.h"
#include "process_pool.h"
#include "recording_writer.h"
#include "stats_report.h"
#include "text.h"

namespace tp::preload {

namespace {
ProcessSettings* settings = nullptr;
std::atomic<bool> recordingWritten{false};

// Whether the calling process is the one the settings describe, and not a vfork child sharing its memory.
TP_ALWAYS_RUN bool thisProcess() { return getpid() == settings->pid; }

// What a process of the tree does as it ends: its recording, and its counters where --stats asked.
TP_ALWAYS_RUN void processEnds() {
  writeRecordingOnce();
  Pool* pool = madePool();
  if (settings->stats && thisProcess() && (settings->root || (pool && pool->stats().allocs > 0)) && stderrAsAtStart(*settings)) {
    try {
      printStats(*settings, pool);
    } catch (...) {
      sayOutOfMemory("stats");
    }
  }
}
}  // namespace

ProcessSettings* processSettings() { return settings; }
TP_ALWAYS_RUN void adoptSettings(ProcessSettings* adopted) { settings = adopted; }

void noteStderr(ProcessSettings& s) {
  struct stat st;
  s.stderrKnown = fstat(STDERR_FILENO, &st) == 0;
  s.stderrDevice = s.stderrKnown ? st.st_dev : 0;
  s.stderrInode = s.stderrKnown ? st.st_ino : 0;
}

bool stderrAsAtStart(const ProcessSettings& s) {
  struct stat st;
  return s.stderrKnown && fstat(STDERR_FILENO, &st) == 0 && st.st_dev == s.stderrDevice && st.st_ino == s.stderrInode;
}

bool nameRecordFile(ProcessSettings& s) {
  Text file(s.recordPath, sizeof s.recordPath);
  for (const char* c = s.recordPattern.c_str(); *c; ++c) {
    if (c[0] == '%' && c[1] == 'p') {
      file.add(static_cast<uint64_t>(getpid()));
      ++c;
    } else {
      file.add(*c);
    }
  }
  return !file.overflowed();
}

void say(const std::string& line) {
  const std::string text = "tensorpool: " + line + "\n";
  ssize_t ignored = write(STDERR_FILENO, text.data(), text.size());
  (void)ignored;
}

void sayOncePerRun(const std::string& what, const std::string& line) {
  uint64_t hash = 14695981039346656037ull;  // FNV-1a
  for (unsigned char c : what) hash = (hash ^ c) * 1099511628211ull;
  char mark[20];
  snprintf(mark, sizeof mark, "%016llx", static_cast<unsigned long long>(hash));
  if (!noteSaid(mark)) say(line);
}

void sayOutOfMemory(const char* what) {
  const char head[] = "tensorpool: out of memory at exit: no ";
  const char tail[] = " written\n";
  ssize_t ignored = write(STDERR_FILENO, head, sizeof head - 1);
  ignored = write(STDERR_FILENO, what, strlen(what));
  ignored = write(STDERR_FILENO, tail, sizeof tail - 1);
  (void)ignored;
}

TP_ALWAYS_RUN void writeRecordingOnce() {
  Pool* pool = madePool();
  if (!settings->record || !thisProcess() || !(settings->root || pool) || recordingWritten.exchange(true)) return;
  char error[256];
  const RecordingHeader header{settings->minBytes, settings->program.c_str(), settings->run.c_str()};
  if (!writeRecording(pool, settings->recordPath, header, error, sizeof error) && stderrAsAtStart(*settings)) {
    char line[PATH_MAX + 320];
    Text text(line, sizeof line);
    text.add("tensorpool: TENSORPOOL_RECORD=").add(settings->recordPath).add(": ").add(error).add('\n');
    ssize_t ignored = write(STDERR_FILENO, text.data(), text.size());
    (void)ignored;
  }
}

TP_ALWAYS_RUN void atExit(void*) {
  InternalScope inside;
  processEnds();
}

TP_ALWAYS_RUN void poolForkedChild() {
  if (!settings) return;
  settings->pid = getpid();
  settings->root = false;
  if (settings->record) {
    recordingWritten.store(false);
    if (!nameRecordFile(*settings)) settings->record = false;  // a pid longer than the parent's does not fit: no file
  }
}

void processEndsAt_exit() {
  if (!settings || !poolReady() || insidePool()) return;
  InternalScope inside;
  processEnds();
}

}  // namespace tp::preload

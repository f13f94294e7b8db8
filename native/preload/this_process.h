// This process as the preload library sees it: the settings start-up read for it (startup.cc), what it says on
// stderr, and what it does as it ends (its recording, its --stats line), forked children included. Internal to
// native/preload.
#pragma once

#include <sys/stat.h>

#include <limits.h>
#include <sys/types.h>

#include <cstdint>
#include <string>

namespace tp::preload {

struct ProcessSettings {
  const char* mode = "default";  // "default" (the default classes), "planned", "recording" or "adaptive"
  uint64_t minBytes = 0;         // the threshold
  std::string planPath;          // the plan this process serves (TENSORPOOL_PLAN), or empty
  std::string planFor;           // the program of a TENSORPOOL_PLAN this process is not (it serves default classes)
  bool spans = false;            // the plan is of the spans kind: the default classes' spans serve, its reserve kept
  bool record = false;
  std::string recordPattern;       // TENSORPOOL_RECORD as given (%p: the pid of the process that writes)
  char recordPath[PATH_MAX] = {};  // this process's file: the pattern with its pid (nameRecordFile)
  bool stats = false;
  bool root = false;  // the first process of the tree that loaded the library (or it after an exec)
  // This process: the one that read these settings, or a child forked from it since (poolForkedChild). A
  // child made by vfork (posix_spawn), which shares its parent's memory until it execs, is neither: it writes
  // nothing.
  pid_t pid = 0;
  std::string program;  // thisProgram(), with a plan or a recording: written into recordings, matched against a plan's
  std::string run;      // runOf(), with a recording
  // With --stats or a recording: the file descriptor 2 was when the library loaded (stderrAtStart), so that what
  // is said at exit goes nowhere else: a program that closed its stderr and opened a file of its own as 2
  // would find the line in that file.
  bool stderrKnown = false;
  dev_t stderrDevice = 0;
  ino_t stderrInode = 0;
};

// Notes in `settings` what descriptor 2 is now (before main: the stderr the program was given).
void noteStderr(ProcessSettings& settings);
// Whether descriptor 2 is still the file noteStderr saw (the same device and inode).
bool stderrAsAtStart(const ProcessSettings& settings);

// The settings once start-up adopted them (never destroyed: the process may free until its very end), else
// nullptr: before start-up, or where it found the configuration bad (the pool is off).
ProcessSettings* processSettings();
void adoptSettings(ProcessSettings* settings);

// settings.recordPattern with each %p replaced by this process's pid, into settings.recordPath, with no heap
// (a forked child names its file in fork's handler). False when the path does not fit.
bool nameRecordFile(ProcessSettings& settings);

// A line on stderr, "tensorpool: " first.
void say(const std::string& line);
// say() for what every process of a tree would find the same (a bad setting, a plan for another program): said
// by the first process that finds `what`, not again by the processes it starts or execs (a shell script's
// every command, pyenv's shims).
void sayOncePerRun(const std::string& what, const std::string& line);
// Said without allocating: a program that used all the memory it may have still exits as it would.
void sayOutOfMemory(const char* what);

// The recording, once per process: at exit, at _exit, or when SIGINT or SIGTERM ends it (signal_flush.h).
// Written with no heap (recording_writer.h). A process whose pool was never made recorded nothing: only the
// root leaves a file for it.
void writeRecordingOnce();
// exit()'s handler (startup.cc registers it): the recording, and the --stats line.
void atExit(void*);
// In fork()'s child (fork.cc): the settings describe this process now. It is no longer the root of the tree,
// and its recording goes to a file of its own where TENSORPOOL_RECORD has %p (written at its exit or _exit).
// Allocates nothing.
void poolForkedChild();
// The process ends by _exit() or _Exit() (exit_calls.h): what exit() would do for it, its recording and its
// stats, where that can be done safely: not in a vfork child (which shares its parent's memory), and not on
// a thread inside the pool (it may hold the pool's lock). The recording takes no heap (recording_writer.h).
void processEndsAt_exit();

}  // namespace tp::preload

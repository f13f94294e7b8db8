#include "process_pool.h"

#include <errno.h>
#include <limits.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "os/os.h"
#include "core/pool.h"
#include "fork.h"
#include "always_run.h"
#include "c_heap.h"
#include "decay_thread.h"
#include "next_allocator.h"
#include "plan_file.h"
#include "program_name.h"
#include "record_file.h"
#include "recording_writer.h"
#include "text.h"
#include "signal_flush.h"
#include "process_api.h"

#ifndef TP_PACKAGE_VERSION
#define TP_PACKAGE_VERSION "unknown"
#endif

namespace tp::preload {

thread_local unsigned detail::insideDepth = 0;
std::atomic<size_t> detail::routeFrom{SIZE_MAX};
std::atomic<uint8_t> detail::mallocExtras{0};

namespace {
using detail::insideDepth;

std::atomic<bool> ready{false};
uint64_t minBytes = uint64_t{64} << 10;
std::shared_ptr<Pool>* processPool = nullptr;  // never destroyed: memory may be freed until the very end
std::atomic<Pool*> madePool{nullptr};

// What the pool is made of, read at load. The pool itself is made at the first request it serves (or when
// JS asks for it): a process that never allocates above the threshold (a shell, the helpers a launcher
// starts: python3 behind pyenv's shims ran 30) never maps and pre-faults a plan's arena.
struct Recipe {
  // A plan file's classes, or nullptr: the default classes (built when the pool is made, not at load: their
  // code stays out of the pages a program that never makes the pool holds, always_run.h), with the reserve
  // of a plan of the spans kind.
  PlanSpec* plan = nullptr;  // owned: deleted with the recipe, when the pool is made
  uint64_t spanReserve = 0;
  PoolOptions options;
  bool record = false;
  uint64_t recordEvents = 0;
  bool reserveGiven = false;  // TENSORPOOL_RESERVE set: taken as it is
};
Recipe* recipe = nullptr;  // nullptr once made, or once making it failed
std::mutex making;         // held while the pool is made, and across fork(): no child inherits it half made

Pool* made() { return madePool.load(std::memory_order_acquire); }
Pool& pool() { return *made(); }  // Pre: the pool was made (its blocks exist, or JS was handed the table)

void setMallocExtra(detail::MallocExtra extra, bool on) {
  if (on) detail::mallocExtras.fetch_or(extra, std::memory_order_relaxed);
  else detail::mallocExtras.fetch_and(static_cast<uint8_t>(~extra), std::memory_order_relaxed);
}

void say(const std::string& line);
void writeRecordingOnce();
uint64_t defaultReserve();
void queuedFreeFailed(ReleaseStatus status);

PlanSpec defaultClasses(uint64_t spanReserve) {
  PlanSpec plan = defaultPlan();
  plan.spanReserve = spanReserve;
  return plan;
}

// The pool, made now if it is not yet; nullptr when making it failed (the process is then on the C library).
Pool* servingPool() {
  if (Pool* p = made()) return p;
  InternalScope inside;
  std::lock_guard lock(making);
  if (Pool* p = made()) return p;
  if (!recipe) return nullptr;
  std::string error;
  // The request the pool cannot serve goes to the C library, which sets errno only where it fails too.
  const int saved = errno;
  // A limit the program set since start-up (setrlimit(RLIMIT_AS)) bounds the reservation as one set before.
  if (!recipe->reserveGiven) recipe->options.growReserve = std::min(recipe->options.growReserve, defaultReserve());
  // The address map free() reads is mapped with the pool, not at load: in a process whose pool is never
  // made, free() finds no map and goes straight to the C library.
  std::shared_ptr<Pool> fresh;
  if (!os::trackMappings()) error = std::string("cannot map the address map: ") + strerror(errno);
  else fresh = Pool::create(recipe->plan ? *recipe->plan : defaultClasses(recipe->spanReserve), recipe->options, &error);
  if (fresh && recipe->record) fresh->startRecording(recipe->recordEvents);
  const bool decays = recipe->options.decayMs != PoolOptions::kNoDecay;
  const bool recording = recipe->record;
  delete recipe->plan;
  delete recipe;
  recipe = nullptr;
  if (!fresh) {
    detail::routeFrom.store(SIZE_MAX, std::memory_order_release);
    say(error + "; the pool is off, the C library serves every allocation");
    errno = saved;
    return nullptr;
  }
  errno = saved;
  processPool = new std::shared_ptr<Pool>(std::move(fresh));
  madePool.store(processPool->get(), std::memory_order_release);
  setMallocExtra(detail::kPoolTicks, decays);
  // Only now, with something to record: a process that records nothing keeps SIGINT's and SIGTERM's
  // dispositions as it found them.
  if (recording) flushOnTerminatingSignals(writeRecordingOnce);
  return made();
}

struct Settings {
  const char* mode = "default";
  std::string planPath;
  std::string recordPattern;  // TENSORPOOL_RECORD as given (%p: the pid of the process that writes)
  char recordPath[PATH_MAX] = {};  // this process's file: the pattern with its pid (nameRecordFile)
  bool stats = false;
  bool root = false;  // the first process of the tree that loaded the library (or it after an exec)
  bool record = false;
  // This process: the one that read these settings, or a child forked from it since (poolForkedChild). A
  // child made by vfork (posix_spawn), which shares its parent's memory until it execs, is neither: it writes
  // nothing.
  pid_t pid = 0;
  std::string program;  // thisProgram(), with a plan or a recording: written into recordings, matched against a plan's
  std::string planFor;  // the program of a TENSORPOOL_PLAN this process is not (it serves default classes)
  std::string run;      // runOf(), with a recording
  bool spans = false;   // the plan is of the spans kind: the default classes' spans serve, its reserve kept
};
Settings* settings = nullptr;

void say(const std::string& line) {
  const std::string text = "tensorpool: " + line + "\n";
  ssize_t ignored = write(STDERR_FILENO, text.data(), text.size());
  (void)ignored;
}

// say() for what every process of a tree would find the same (a bad setting, a plan for another program): said
// by the first process that finds it, not again by the processes it starts or execs (a shell script's every
// command, pyenv's shims). TENSORPOOL_SAID, set here and inherited, holds the hashes of the `what`s said.
void sayOncePerRun(const std::string& what, const std::string& line) {
  uint64_t hash = 14695981039346656037ull;  // FNV-1a
  for (unsigned char c : what) hash = (hash ^ c) * 1099511628211ull;
  char mark[20];
  snprintf(mark, sizeof mark, "%016llx", static_cast<unsigned long long>(hash));
  const char* said = getenv("TENSORPOOL_SAID");
  const std::string before = said ? said : "";
  if (before.find(mark) != std::string::npos) return;
  say(line);
  // Bounded: a tree that keeps finding new things to say keeps the newest few.
  const std::string kept = before.size() > 16 * 17 ? before.substr(before.size() - 15 * 17) : before;
  setenv("TENSORPOOL_SAID", (kept.empty() ? std::string(mark) : kept + "," + mark).c_str(), 1);
}

// "65536", "64K", "16M", "2G" (binary units). False when the value is not such a number in [1, 2^47].
bool parseBytes(const char* text, uint64_t* out) {
  char* end = nullptr;
  errno = 0;
  if (!text || *text < '0' || *text > '9') return false;
  unsigned long long value = strtoull(text, &end, 10);
  if (errno == ERANGE) return false;
  unsigned shift = 0;
  if (*end == 'K' || *end == 'k') shift = 10, ++end;
  else if (*end == 'M' || *end == 'm') shift = 20, ++end;
  else if (*end == 'G' || *end == 'g') shift = 30, ++end;
  if (*end != '\0' || value == 0 || value > (Pool::kMaxRequest >> shift)) return false;
  *out = static_cast<uint64_t>(value) << shift;
  return true;
}

// A decimal count from 0 to 2^32 (no suffix). False when the value is not one.
bool parseCount(const char* text, uint64_t* out) {
  char* end = nullptr;
  errno = 0;
  if (!text || *text < '0' || *text > '9') return false;
  const unsigned long long value = strtoull(text, &end, 10);
  if (errno == ERANGE || *end != '\0' || value > (uint64_t{1} << 32)) return false;
  *out = value;
  return true;
}

// "1"/"true"/"on" or "0"/"false"/"off"/"" ; false when it is neither.
bool parseSwitch(const char* text, bool* out) {
  const std::string v = text ? text : "";
  if (v == "1" || v == "true" || v == "on") return *out = true, true;
  if (v == "0" || v == "false" || v == "off" || v.empty()) return *out = false, true;
  return false;
}

// --- the table the addon calls (process_api.h); every entry runs inside the pool ---

void apiStats(PoolStats* out) {
  InternalScope inside;
  *out = pool().stats();
}
size_t apiClassStats(ClassStats* out, size_t capacity) {
  InternalScope inside;
  const std::vector<ClassStats> classes = pool().classStats();
  std::copy_n(classes.begin(), std::min(capacity, classes.size()), out);
  return classes.size();
}
uint64_t apiInterval() {
  InternalScope inside;
  return pool().interval();
}
void apiMarkIteration(IterationSummary* out) {
  InternalScope inside;
  *out = pool().markIteration();
}
void apiStartRecording(uint64_t limit) {
  InternalScope inside;
  pool().startRecording(limit);
}
void apiStopRecording() {
  InternalScope inside;
  pool().stopRecording();
}
void apiRecordingState(RecordingState* out) {
  InternalScope inside;
  *out = pool().recordingState();
}
size_t apiCopyRecording(uint64_t from, RecordedEvent* out, size_t capacity) {
  InternalScope inside;
  const std::vector<RecordedEvent> events = pool().copyRecording(from);
  const size_t n = std::min(capacity, events.size());
  std::copy_n(events.begin(), n, out);
  return n;
}
void apiDiscardRecording(uint64_t before) {
  InternalScope inside;
  pool().discardRecording(before);
}
PlanSpec planOf(const PlanView* view) {
  PlanSpec plan;
  plan.interval = view->interval;
  plan.classes.assign(view->classes, view->classes + view->classCount);
  plan.schedule.assign(view->schedule, view->schedule + view->scheduleCount);
  plan.iterationStarts.assign(view->iterationStarts, view->iterationStarts + view->iterationCount);
  plan.cycle = view->cycle;
  plan.layout.assign(view->layout, view->layout + view->layoutCount);
  return plan;
}
void copyError(const std::string& error, char* out, size_t capacity) {
  if (capacity == 0) return;
  const size_t n = std::min(capacity - 1, error.size());
  memcpy(out, error.data(), n);
  out[n] = '\0';
}
uint64_t apiPrepareSwitch(const PlanView* view, char* error, size_t capacity) {
  InternalScope inside;
  std::string why;
  const uint64_t generation = pool().prepareSwitch(planOf(view), &why);
  if (!generation) copyError(why, error, capacity);
  return generation;
}
int apiSwitchPlan(const PlanView* view, char* error, size_t capacity) {
  InternalScope inside;
  std::string why;
  if (pool().switchPlan(planOf(view), &why)) return 1;
  copyError(why, error, capacity);
  return 0;
}
uint64_t apiDiscardRetired() {
  InternalScope inside;
  return pool().discardRetired();
}
uint64_t apiTrim() { return poolTrim(); }
void apiLeaveThread() { ++insideDepth; }  // never undone: the thread is inside for the rest of its life

ProcessPoolApi api = {
    kProcessApiVersion, processApiLayout(), TP_PACKAGE_VERSION, nullptr, 0, nullptr, nullptr,
    apiStats, apiClassStats, apiInterval, apiMarkIteration, apiStartRecording, apiStopRecording, apiRecordingState,
    apiCopyRecording, apiDiscardRecording, apiPrepareSwitch, apiSwitchPlan, apiDiscardRetired, apiLeaveThread,
    apiTrim,
};

void printStats();

std::atomic<bool> recordingWritten{false};

// Said without allocating: a program that used all the memory it may have still exits as it would.
void sayOutOfMemory(const char* what) {
  const char head[] = "tensorpool: out of memory at exit: no ";
  const char tail[] = " written\n";
  ssize_t ignored = write(STDERR_FILENO, head, sizeof head - 1);
  ignored = write(STDERR_FILENO, what, strlen(what));
  ignored = write(STDERR_FILENO, tail, sizeof tail - 1);
  (void)ignored;
}

// Whether the calling process is the one these settings describe, and not a vfork child sharing its memory.
bool thisProcess() { return getpid() == settings->pid; }

// The recording, once per process: at exit, at _exit, or when SIGINT or SIGTERM ends it (signal_flush.h).
// Written with no heap (recording_writer.h). A process whose pool was never made recorded nothing: only the
// root leaves a file for it.
void writeRecordingOnce() {
  if (!settings->record || !thisProcess() || !(settings->root || made()) || recordingWritten.exchange(true)) return;
  char error[256];
  const RecordingHeader header{minBytes, settings->program.c_str(), settings->run.c_str()};
  if (!writeRecording(made(), settings->recordPath, header, error, sizeof error)) {
    char line[PATH_MAX + 320];
    Text text(line, sizeof line);
    text.add("tensorpool: TENSORPOOL_RECORD=").add(settings->recordPath).add(": ").add(error).add('\n');
    ssize_t ignored = write(STDERR_FILENO, text.data(), text.size());
    (void)ignored;
  }
}

// What a process of the tree does as it ends: its recording, and its counters where --stats asked.
void processEnds() {
  writeRecordingOnce();
  if (settings->stats && thisProcess() && (settings->root || (made() && pool().stats().allocs > 0))) {
    try {
      printStats();
    } catch (...) {
      sayOutOfMemory("stats");
    }
  }
}

TP_ALWAYS_RUN void atExit(void*) {
  InternalScope inside;
  processEnds();
}

// Whether this process is the first of its tree to load the library: TENSORPOOL_ROOT_PID names it, set here
// for the processes it starts (an exec keeps the pid, and the root). The variable is the library's own: a
// value that is not a pid is taken as unset.
bool claimRoot() {
  const long pid = static_cast<long>(getpid());
  const char* root = getenv("TENSORPOOL_ROOT_PID");
  char* end = nullptr;
  if (root && *root >= '0' && *root <= '9') {
    const long value = strtol(root, &end, 10);
    if (*end == '\0') return value == pid;
  }
  char text[24];
  snprintf(text, sizeof text, "%ld", pid);
  setenv("TENSORPOOL_ROOT_PID", text, 1);
  return true;
}

// The run this process belongs to, named in its recording: the root names it (its pid and the time) for
// the processes it starts (TENSORPOOL_RUN), so that a file holding a recording of an earlier run is replaced
// whatever its size, and one of this run only by a larger one.
std::string runOf(bool root) {
  const char* inherited = getenv("TENSORPOOL_RUN");
  if (!root && inherited) return inherited;
  const std::string run = std::to_string(static_cast<long>(getpid())) + "." + std::to_string(os::monotonicNs());
  setenv("TENSORPOOL_RUN", run.c_str(), 1);
  return run;
}

// TENSORPOOL_RECORD with each %p replaced by this process's pid, into settings->recordPath (with no heap: a
// forked child names its file in fork's handler). False when the path does not fit.
bool nameRecordFile() {
  Text file(settings->recordPath, sizeof settings->recordPath);
  for (const char* c = settings->recordPattern.c_str(); *c; ++c) {
    if (c[0] == '%' && c[1] == 'p') {
      file.add(static_cast<uint64_t>(getpid()));
      ++c;
    } else {
      file.add(*c);
    }
  }
  return !file.overflowed();
}

// Address space the default classes reserve at first: 16 GiB, or under an RLIMIT_AS (`ulimit -v`) a share of
// what the limit leaves (Pool::kLimitedSpareShare), so that the program's own mappings find the rest free; the
// arena grows in place past it as it needs (ArenaOptions::growInPlace).
uint64_t defaultReserve() {
  const uint64_t left = os::addressSpaceLeft() / Pool::kLimitedSpareShare / os::kTrackGranule * os::kTrackGranule;
  return std::min(uint64_t{16} << 30, left);
}

// Reads the environment and builds the pool. Any error leaves the process on the C library (pass-through).
void initialise() {
  // The next allocator found and set up before the pool's fork handlers are registered (holdPoolAcrossFork):
  // pthread_atfork's prepare handlers run last registered first, so the pool's locks are then taken before
  // the next allocator's (jemalloc's), the order in which a thread inside the pool takes them.
  resolveNextAllocator();
  findNextExit();
  InternalScope inside;
  auto fail = [](const std::string& why) {
    const std::string line = why + "; the pool is off, the C library serves every allocation";
    sayOncePerRun(line, line);
  };
  const char* minText = getenv("TENSORPOOL_MIN_BYTES");
  const char* planPath = getenv("TENSORPOOL_PLAN");
  const char* recordPath = getenv("TENSORPOOL_RECORD");
  const char* reserveText = getenv("TENSORPOOL_RESERVE");
  const char* eventsText = getenv("TENSORPOOL_RECORD_EVENTS");
  const char* decayText = getenv("TENSORPOOL_DECAY_MS");
  bool adaptive = false, stats = false;
  if (minText && !parseBytes(minText, &minBytes)) return fail("TENSORPOOL_MIN_BYTES=" + std::string(minText) + " is not a byte count from 1 to 2^47 (such as 65536 or 64K)");
  uint64_t reserve = defaultReserve();
  if (reserveText && !parseBytes(reserveText, &reserve)) return fail("TENSORPOOL_RESERVE=" + std::string(reserveText) + " is not a byte count (such as 16G)");
  uint64_t recordEvents = uint64_t{4} << 20;
  if (eventsText && !parseBytes(eventsText, &recordEvents)) return fail("TENSORPOOL_RECORD_EVENTS=" + std::string(eventsText) + " is not a count (such as 4M)");
  uint64_t decayMs = 1000;
  if (decayText && strcmp(decayText, "off") != 0 && !parseCount(decayText, &decayMs)) return fail("TENSORPOOL_DECAY_MS=" + std::string(decayText) + " is not a number of milliseconds (such as 1000) or off");
  if (decayText && strcmp(decayText, "off") == 0) decayMs = PoolOptions::kNoDecay;
  if (!parseSwitch(getenv("TENSORPOOL_ADAPTIVE"), &adaptive)) return fail("TENSORPOOL_ADAPTIVE must be 1 or 0");
  if (!parseSwitch(getenv("TENSORPOOL_STATS"), &stats)) return fail("TENSORPOOL_STATS must be 1 or 0");
  bool decayThread = true;
  const char* decayThreadText = getenv("TENSORPOOL_DECAY_THREAD");
  if (decayThreadText && !parseSwitch(decayThreadText, &decayThread)) return fail("TENSORPOOL_DECAY_THREAD must be 1 or 0");
  if (planPath && !*planPath) return fail("TENSORPOOL_PLAN is empty");
  if (recordPath && !*recordPath) return fail("TENSORPOOL_RECORD is empty");

  auto* s = new Settings;
  s->stats = stats;
  s->root = claimRoot();
  s->pid = getpid();
  if (planPath || recordPath) s->program = thisProgram();  // what only a plan or a recording asks about
  PlanSpec* plan = nullptr;  // a plan file's classes, for the recipe
  uint64_t spanReserve = 0;
  PoolOptions options;
  options.osMapThreshold = 0;  // every OS block is a tracked mapping, so free() recognises it
  options.growth = Growth::Spans;
  options.growReserve = reserve;
  options.arena.growInPlace = true;  // past its reservation, the arena grows where it is (arena.h)
  options.decayMs = decayMs;
  // A buffer grown by realloc past 1 MiB gets a mapping of its own, as glibc's would: a Python program building
  // ~45 MB strings by appending peaked at 1.17x glibc's RSS in arena spans (a copy beside the old one wherever
  // a span could not grow in place; a freed one resident until decay), 1.01x so. The bound rises as moved
  // blocks are freed (PoolOptions::reallocMappedFrom), so a program reallocating blocks to sizes at random soon
  // stops mapping them; it starts at 1 MiB rather than 4, as what a buffer grown below it leaves behind in
  // spans stays resident until decay (a buffer grown by eighths to 10 MiB, a block of its size allocated after
  // each step: 36 MiB peak from 4 MiB, 12 from 1; glibc, whose threshold starts at 128 KiB, 11).
  // docs/benchmarks.md, python-strings and realloc.
  options.reallocMappedFrom = uint64_t{1} << 20;
  options.queuedReleaseFailed = queuedFreeFailed;  // free() queues where another thread holds the lock (Pool::releaseSoon)

  if (planPath) {
    PlanSpec planned;
    bool spans = false;
    std::string error, program;
    if (!readPlanFile(planPath, s->program, &planned, &spans, &program, &error)) return delete s, fail(error);
    if (!program.empty() && !s->program.empty() && program != s->program) {
      s->planFor = program;  // another process of the tree is the one the plan serves
      sayOncePerRun("TENSORPOOL_PLAN is for " + program, "TENSORPOOL_PLAN is for \"" + program + "\": \"" + s->program +
                    "\" and the other programs of this run serve the default classes");
    } else if (spans) {
      // Training found that the recording's spans hold less than any plan of blocks would (requests that
      // overlap at random, each busy period a new mix of sizes): the default classes' spans serve, the
      // recorded working set carved up front and, once written, kept resident through decay and trim.
      spanReserve = planned.spanReserve;
      s->planPath = planPath;
      s->mode = "planned";
      s->spans = true;
    } else {
      plan = new PlanSpec(std::move(planned));
      // Still growing, once nothing free fits: a departure from the plan (a buffer a garbage collector frees
      // later than in the recorded run) costs one carved, pre-faulted block, not a mapping faulted in again
      // every time it recurs.
      options.growth = Growth::AfterBorrowing;
      s->planPath = planPath;
      s->mode = "planned";
    }
  }
  if (adaptive) s->mode = "adaptive";
  if (recordPath) {
    settings = s;
    s->recordPattern = recordPath;
    // Checked now, written at exit (where this process's is the run's largest recording, or to a file of
    // its own, %p): a path that cannot take it is refused before the program starts.
    std::string error = "the path is too long";
    if (!nameRecordFile() || !recordFileUsable(s->recordPath, &error)) {
      const std::string why = "TENSORPOOL_RECORD=" + std::string(s->recordPath) + ": " + error;
      settings = nullptr;
      delete plan;
      delete s;
      return fail(why);
    }
    s->run = runOf(s->root);
    s->record = true;
    if (!adaptive) s->mode = "recording";
  }
  recipe = new Recipe{plan, spanReserve, options, s->record, recordEvents, reserveText != nullptr};
  settings = s;
  holdPoolAcrossFork();
  __cxa_atexit(atExit, nullptr, __dso_handle);  // atexit (always_run.h)
  api.mode = s->mode;
  api.minBytes = minBytes;
  api.planPath = s->planPath.empty() ? nullptr : s->planPath.c_str();
  api.recordPath = s->record ? s->recordPath : nullptr;
  initialiseCHeap();
  configureDecayThread(decayThread, decayMs);
  struct rlimit limit;
  setMallocExtra(detail::kAddressLimited, getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY);
  ready.store(true, std::memory_order_release);
  detail::routeFrom.store(minBytes, std::memory_order_release);
}

__attribute__((constructor)) void initialiseOnLoad() { initialise(); }

void printStats() {
  const std::string notFor = settings->planFor.empty() ? ""
                                                       : "; TENSORPOOL_PLAN is for \"" + settings->planFor + "\", this is \"" +
                                                             settings->program + "\": default classes";
  if (!made()) {
    say("process pool (pid " + std::to_string(static_cast<long>(getpid())) + ", " + settings->mode + ", requests >= " +
        std::to_string(minBytes) + " B): served nothing (it was never made)" + notFor);
    return;
  }
  const PoolStats s = pool().stats();
  char line[1024];
  snprintf(line, sizeof line,
           "process pool (pid %ld, %s, requests >= %llu B): allocs %llu, releases %llu, hits %llu, borrows %llu, grown %llu, "
           "OS fallbacks %llu, OS oversize %llu; live %llu blocks / %llu B (peak %llu B); arena %llu B carved, "
           "%llu B committed, %llu B reserved; iterations %llu, switches %llu",
           static_cast<long>(getpid()), settings->mode, static_cast<unsigned long long>(minBytes), static_cast<unsigned long long>(s.allocs),
           static_cast<unsigned long long>(s.releases), static_cast<unsigned long long>(s.hits),
           static_cast<unsigned long long>(s.borrows), static_cast<unsigned long long>(s.grown),
           static_cast<unsigned long long>(s.osFallbacks), static_cast<unsigned long long>(s.osOversize),
           static_cast<unsigned long long>(s.liveBlocks), static_cast<unsigned long long>(s.bytesLive),
           static_cast<unsigned long long>(s.peakBytesLive), static_cast<unsigned long long>(s.arenaBytes),
           static_cast<unsigned long long>(s.committedBytes), static_cast<unsigned long long>(s.reservedBytes),
           static_cast<unsigned long long>(s.iterations), static_cast<unsigned long long>(s.switches));
  std::string more;
  if (s.scheduleHits + s.scheduleMisses > 0) {
    more = "; schedule " + std::to_string(s.scheduleHits) + " hits, " + std::to_string(s.scheduleMisses) + " misses";
  }
  if (settings->spans) more += "; served from spans (the plan's kind)";
  if (s.purgedBlocks > 0) more += "; decay and trim gave back " + std::to_string(s.purgedBytes) + " B in " + std::to_string(s.purgedBlocks) + " blocks and spans";
  if (s.movedToMappings > 0) more += "; realloc moved " + std::to_string(s.movedToMappings) + " blocks to mappings of their own";
  say(line + more + notFor);
}


}  // namespace

TP_ALWAYS_RUN InternalScope::InternalScope() { ++insideDepth; }
TP_ALWAYS_RUN InternalScope::~InternalScope() { --insideDepth; }

TP_ALWAYS_RUN bool insidePool() { return insideDepth != 0; }
TP_ALWAYS_RUN void enterPool() { ++insideDepth; }
TP_ALWAYS_RUN void leavePool() { --insideDepth; }

TP_ALWAYS_RUN void lockPoolForFork() {
  making.lock();
  if (Pool* p = made()) p->lockForFork();
}

TP_ALWAYS_RUN void unlockPoolAfterFork(bool child) {
  if (Pool* p = made()) p->unlockAfterFork(child);
  making.unlock();
}

TP_ALWAYS_RUN void poolForkedChild() {
  if (!settings) return;
  settings->pid = getpid();
  settings->root = false;
  if (settings->record) {
    recordingWritten.store(false);
    if (!nameRecordFile()) settings->record = false;  // a pid longer than the parent's does not fit: no file
  }
}

void processEndsAt_exit() {
  if (!settings || !ready.load(std::memory_order_acquire) || insidePool()) return;
  InternalScope inside;
  processEnds();
}

void* poolAlloc(size_t bytes, bool* zero) {
  Pool* serving = servingPool();
  if (!serving) return nullptr;
  InternalScope inside;
  // errno is the C library's to set: a pool that cannot serve leaves the request to it, which then
  // succeeds (errno untouched, as on every success) or fails and says why.
  const int saved = errno;
  Allocation a;
  try {
    a = serving->alloc(bytes);
  } catch (...) {  // std::bad_alloc from the pool's own bookkeeping: a failed allocation, not a crash
    a.status = AllocStatus::OutOfMemory;
  }
  errno = saved;
  if (a.status != AllocStatus::Ok) return nullptr;
  cHeapBesidePool(bytes, a.route == Route::Grown || a.route == Route::OsFallback || a.route == Route::OsOversize);
  if (a.route != Route::OsFallback && a.route != Route::OsOversize) decayThreadAfterAlloc();  // an arena block: watched
  // Fresh mappings, and arena blocks never written since carved or given back to the OS, read as zero.
  if (zero) *zero = a.zeroed;
  return a.data;
}

namespace {
// What glibc prints, then abort(): a host that frees what it does not own or frees twice is stopped as
// glibc would stop it, with glibc's words (its message for a block of the sizes the pool serves).
[[noreturn]] void invalidFree(ReleaseStatus status) {
  static const char kDouble[] = "double free or corruption (!prev)\n";
  static const char kInvalid[] = "free(): invalid pointer\n";
  const bool twice = status == ReleaseStatus::NotLive;
  ssize_t ignored = write(STDERR_FILENO, twice ? kDouble : kInvalid, twice ? sizeof kDouble - 1 : sizeof kInvalid - 1);
  (void)ignored;
  abort();
}

// A free() the pool queued (another thread held its lock) that started no live block: found by the thread that
// applies it, which stops the process as the freeing thread would have.
void queuedFreeFailed(ReleaseStatus status) { invalidFree(status); }

void releaseToPool(void* p, bool moved) {
  InternalScope inside;
  const int saved = errno;  // free() leaves errno as it was (glibc since 2.33)
  ReleaseStatus status;
  try {
    status = moved ? pool().releaseMoved(p) : pool().releaseSoon(p);
  } catch (...) {
    status = ReleaseStatus::NotOwned;
  }
  if (status != ReleaseStatus::Ok) invalidFree(status);
  decayThreadAfterRelease();
  errno = saved;
}
}  // namespace

void poolFree(void* p) { releaseToPool(p, false); }
void poolFreeMoved(void* p) { releaseToPool(p, true); }

size_t poolUsableSize(const void* p) {
  InternalScope inside;
  return pool().liveSize(p);
}

bool poolResizeInPlace(void* p, size_t bytes) {
  InternalScope inside;
  const int saved = errno;
  bool resized = false;
  try {
    resized = pool().resizeInPlace(p, bytes);
  } catch (...) {
  }
  errno = saved;
  return resized;
}

void fitPoolToAddressSpace() {
  struct rlimit limit;
  const bool limited = getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY;
  setMallocExtra(detail::kAddressLimited, limited);
  if (!limited || !made()) return;  // (a pool made later reserves within the limit: servingPool)
  InternalScope inside;
  const int saved = errno;
  pool().fitAddressSpace(limit.rlim_cur, os::addressSpaceUsed());
  errno = saved;
}

bool poolGaveBackSpare() {
  if (!made() || insidePool()) return false;
  InternalScope inside;
  const int saved = errno;
  const bool gave = addressSpaceLimited() && pool().giveBackAddressSpace() > 0;
  errno = saved;
  return gave;
}

void* poolResizeMapped(void* p, size_t bytes) {
  InternalScope inside;
  const int saved = errno;
  void* moved = pool().resizeMapped(p, bytes);  // nothing in it throws: its set is re-keyed, not grown
  errno = saved;
  return moved;
}

void* poolAllocMoved(size_t bytes) {
  InternalScope inside;
  const int saved = errno;
  void* fresh = nullptr;
  try {
    fresh = pool().allocMoved(bytes);
  } catch (...) {  // std::bad_alloc from the pool's set of OS blocks: declined, as poolAlloc's failures
  }
  errno = saved;
  // A mapping of its own: memory fresh from the OS, as poolAlloc's grown blocks (glibc would have grown the
  // buffer into what its small blocks freed).
  if (fresh) cHeapBesidePool(bytes, true);
  return fresh;
}

DecayWatch poolDecayTick() {
  Pool* serving = made();
  if (!serving) return DecayWatch::Nothing;
  if (insidePool()) return DecayWatch::Busy;
  InternalScope inside;
  const int saved = errno;
  const DecayWatch found = serving->decayTick();
  errno = saved;
  return found;
}

// `ask` of the serving pool, as the pool's own code (InternalScope: what it allocates comes from the next
// allocator), errno kept; 0 before the pool is made and on a thread already inside it (it may hold the lock).
template <typename Ask>
uint64_t askServing(Ask ask) {
  Pool* serving = made();
  if (!serving || insidePool()) return 0;
  InternalScope inside;
  const int saved = errno;
  const uint64_t answer = ask(*serving);
  errno = saved;
  return answer;
}

void poolQuietFor(uint64_t ns) {
  askServing([ns](Pool& serving) { return serving.quietFor(ns); });
}

uint64_t poolQuietPeriodNs(uint64_t worthBytes) {
  return askServing([worthBytes](Pool& serving) { return serving.quietPeriodNs(worthBytes); });
}

bool poolPurgeSpansFor(uint64_t bytes) {
  Pool* serving = made();
  if (!serving) return true;
  if (insidePool()) return false;
  InternalScope inside;
  const int saved = errno;
  const bool ran = serving->tryPurgeSpansFor(bytes);
  errno = saved;
  return ran;
}

PoolHeld poolHeld() {
  PoolHeld held;
  if (!made() || insidePool()) return held;
  InternalScope inside;
  const int saved = errno;
  try {
    const PoolStats stats = pool().stats();
    held.carved = stats.arenaBytes;
    held.arenaLive = stats.bytesLive > stats.osLiveBytes ? stats.bytesLive - stats.osLiveBytes : 0;
    held.mappedBlocks = stats.osLiveBlocks;
    held.mappedBytes = stats.osLiveBytes;
  } catch (...) {  // std::bad_alloc from the stats' own bookkeeping: the next allocator's figures alone
  }
  errno = saved;
  return held;
}

uint64_t poolTrim() {
  return askServing([](Pool& serving) { return serving.trim(); });
}

}  // namespace tp::preload

extern "C" __attribute__((visibility("default"))) const tp::preload::ProcessPoolApi* tensorpool_process_pool(void) {
  using namespace tp::preload;
  return ready.load(std::memory_order_acquire) && servingPool() ? &api : nullptr;
}

// An iteration mark for code without the addon (Python's sitecustomize under `tensorpool run`, through
// ctypes): as processPool().markIteration() in JS, without adaptive mode's judgement (that lives in JS).
// Returns 1 when it marked, 0 when this process has no serving pool.
extern "C" __attribute__((visibility("default"))) int tensorpool_mark_iteration(void) {
  using namespace tp::preload;
  if (!ready.load(std::memory_order_acquire) || !servingPool()) return 0;
  tp::IterationSummary ended{};
  apiMarkIteration(&ended);
  if (ended.installed) apiDiscardRetired();  // a switch prepared by JS, installed here: free the old arena now
  return 1;
}

// DT_FINI (-Wl,-fini=tp_preload_fini, always_run.h): _fini, beside the end of the code, does nothing here.
extern "C" TP_ALWAYS_RUN void tp_preload_fini() {}

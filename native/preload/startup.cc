// The preload library's start-up: its one constructor, and what it does in order. Any bad setting leaves the
// process on the C library (one line on stderr, once a run), never aborts it.
#include <unistd.h>

#include <string>

#include "always_run.h"
#include "api_table.h"
#include "c_heap.h"
#include "core/pool.h"
#include "decay_thread.h"
#include "exit_calls.h"
#include "fork.h"
#include "next_allocator.h"
#include "options.h"
#include "os/os.h"
#include "plan_file.h"
#include "process_pool.h"
#include "program_name.h"
#include "record_file.h"
#include "signal_flush.h"
#include "sleep_calls.h"
#include "this_process.h"
#include "thread_calls.h"

namespace tp::preload {

namespace {

void refuse(const std::string& why) {
  const std::string line = why + "; the pool is off, the C library serves every allocation";
  sayOncePerRun(line, line);
}

// The pool's options in every process, whatever it serves.
PoolOptions processPoolOptions(const Options& options) {
  PoolOptions pool;
  pool.osMapThreshold = 0;  // every OS block is a tracked mapping, so free() recognises it
  pool.growth = Growth::Spans;
  pool.growReserve = options.reserveGiven ? options.reserve : defaultReserve();
  pool.arena.growInPlace = true;  // past its reservation, the arena grows where it is (arena.h)
  pool.decayMs = options.decayMs == kOff ? PoolOptions::kNoDecay : options.decayMs;
  // A buffer grown by realloc past 1 MiB gets a mapping of its own, as glibc's would (its later growth moves
  // pages rather than copying them, and its memory goes back at free). The bound rises as moved blocks are
  // freed (PoolOptions::reallocMappedFrom), so a program reallocating blocks to sizes at random soon stops
  // mapping them; 1 MiB rather than more, as what a buffer grown below it leaves in spans stays resident
  // until decay (docs/benchmarks.md, python-strings and realloc).
  pool.reallocMappedFrom = uint64_t{1} << 20;
  pool.queuedReleaseFailed = queuedFreeFailed;  // free() queues where another thread holds the lock (Pool::releaseSoon)
  return pool;
}

// What this process serves, from its options: the default classes, a plan's classes or its spans, a
// recording. False where a plan or the recording's file is refused (refuse() said why).
bool configure(const Options& options, ProcessSettings* s, PoolRecipe* recipe) {
  s->minBytes = options.minBytes;
  s->stats = options.stats;
  if (options.stats || options.recordPath) noteStderr(*s);
  s->root = claimRoot();
  s->pid = getpid();
  if (options.planPath || options.recordPath) s->program = thisProgram();  // what only a plan or a recording asks about
  recipe->options = processPoolOptions(options);
  recipe->reserveGiven = options.reserveGiven;
  recipe->recordEvents = options.recordEvents;
  if (options.planPath) {
    PlanSpec planned;
    bool spans = false;
    std::string error, program;
    if (!readPlanFile(options.planPath, s->program, &planned, &spans, &program, &error)) return refuse(error), false;
    if (!program.empty() && !s->program.empty() && program != s->program) {
      s->planFor = program;  // another process of the tree is the one the plan serves
      sayOncePerRun("TENSORPOOL_PLAN is for " + program, "TENSORPOOL_PLAN is for \"" + program + "\": \"" + s->program +
                                                             "\" and the other programs of this run serve the default classes");
    } else if (spans) {
      // Training found that the recording's spans hold less than any plan of blocks would (requests that
      // overlap at random, each busy period a new mix of sizes): the default classes' spans serve, the
      // recorded working set carved up front and, once written, kept resident through decay and trim.
      recipe->spanReserve = planned.spanReserve;
      s->planPath = options.planPath;
      s->mode = "planned";
      s->spans = true;
    } else {
      recipe->plan = new PlanSpec(std::move(planned));
      // Still growing, once nothing free fits: a departure from the plan (a buffer a garbage collector frees
      // later than in the recorded run) costs one carved, pre-faulted block, not a mapping faulted in again
      // every time it recurs.
      recipe->options.growth = Growth::AfterBorrowing;
      s->planPath = options.planPath;
      s->mode = "planned";
    }
  }
  if (options.adaptive) s->mode = "adaptive";
  if (options.recordPath) {
    s->recordPattern = options.recordPath;
    // Checked now, written as the process ends (where this process's is the run's largest recording, or to a
    // file of its own, %p): a path that cannot take it is refused before the program starts.
    std::string error = "the path is too long";
    if (!nameRecordFile(*s) || !recordFileUsable(s->recordPath, &error)) {
      delete recipe->plan;
      return refuse("TENSORPOOL_RECORD=" + std::string(s->recordPath) + ": " + error), false;
    }
    s->run = runOf(s->root, os::monotonicNs());
    s->record = true;
    recipe->record = true;
    if (!options.adaptive) s->mode = "recording";
  }
  return true;
}

// The start-up sequence, in its order.
void start() {
  // 1. The calls the library wraps, found before any is made and outside any signal handler (dlsym is not
  //    async-signal-safe): the next allocator first, set up before the pool's fork handlers are registered
  //    (pthread_atfork's prepare handlers run last registered first, so the pool's locks are then taken
  //    before the next allocator's, jemalloc's, the order in which a thread inside the pool takes them), and
  //    before the others (a dlsym that allocates, glibc's before 2.34, then allocates from it).
  resolveNextAllocator();
  findNextSigaction();
  quiet::findNextSleeps();
  findNextExit();
  threads::noteMainThread();
  // 2. The settings, from the environment: one table (options.h).
  InternalScope inside;
  Options options;
  std::string error;
  if (!readOptions(&options, &error)) return refuse(error);
  auto* settings = new ProcessSettings;
  auto* recipe = new PoolRecipe;
  if (!configure(options, settings, recipe)) {
    delete recipe;
    delete settings;
    return;
  }
  // 3. What the process does around the pool: fork, exit, the C library's heap, decay's thread.
  adoptSettings(settings);
  preparePool(recipe);
  holdPoolAcrossFork();
  __cxa_atexit(atExit, nullptr, __dso_handle);  // atexit (always_run.h)
  describeProcess(*settings);
  initialiseCHeap();
  configureDecayThread(options.decayThread, options.decayMs == kOff ? PoolOptions::kNoDecay : options.decayMs);
  // 4. Requests of at least the threshold go to the pool from now on.
  startRouting(options.minBytes, os::addressSpaceLimit() != UINT64_MAX);
}

__attribute__((constructor)) void startOnLoad() { start(); }

}  // namespace

}  // namespace tp::preload

// DT_FINI (-Wl,-fini=tp_preload_fini, always_run.h): _fini, beside the end of the code, does nothing here.
extern "C" TP_ALWAYS_RUN void tp_preload_fini() {}

// What the preload library offers the addon: a table of functions over the process pool. The addon never
// touches the process Pool object itself: the two are separate builds of the core, and only the library's
// own code knows to send the pool's internal allocations to the C library (see process_pool.cc). The
// structs crossing are the core's plain ones; `layout` lets either side refuse a build that differs.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/pool.h"

namespace tp::preload {

constexpr uint32_t kProcessApiVersion = 4;

// Sizes of everything passed through the table, folded: both sides compute it from their own headers.
constexpr uint32_t processApiLayout() {
  return static_cast<uint32_t>(sizeof(PoolStats) * 131 + sizeof(IterationSummary) * 31 + sizeof(RecordingState) * 17 +
                               sizeof(RecordedEvent) * 7 + sizeof(ClassStats) * 5 + sizeof(PlanClass) * 3 +
                               sizeof(ScheduleEntry) + sizeof(PlacedBlock) * 11 + 2);
}

// A plan as arrays (the classes sorted by size, as SizeClassTable wants them).
struct PlanView {
  uint64_t interval;
  const PlanClass* classes;
  size_t classCount;
  const ScheduleEntry* schedule;
  size_t scheduleCount;
  const uint64_t* iterationStarts;  // PlanSpec::iterationStarts
  size_t iterationCount;
  uint64_t cycle;                   // PlanSpec::cycle
  const PlacedBlock* layout;        // PlanSpec::layout
  size_t layoutCount;
};

struct ProcessPoolApi {
  uint32_t version;        // kProcessApiVersion
  uint32_t layout;         // processApiLayout()
  const char* build;       // the package version the library was built from
  const char* mode;        // "default" (growing default classes), "planned", "recording" or "adaptive"
  uint64_t minBytes;       // requests of at least this many bytes are served by the pool
  const char* planPath;    // TENSORPOOL_PLAN, or nullptr
  const char* recordPath;  // TENSORPOOL_RECORD, or nullptr

  void (*stats)(PoolStats* out);
  // Copies at most `capacity` classes; returns how many the serving arena has.
  size_t (*classStats)(ClassStats* out, size_t capacity);
  uint64_t (*interval)();
  void (*markIteration)(IterationSummary* out);
  void (*startRecording)(uint64_t limit);
  void (*stopRecording)();
  void (*recordingState)(RecordingState* out);
  // Copies the events numbered [from, from + capacity) that are held; returns how many it copied.
  size_t (*copyRecording)(uint64_t from, RecordedEvent* out, size_t capacity);
  void (*discardRecording)(uint64_t before);
  // As Pool::prepareSwitch / switchPlan / discardRetired; errors are written NUL-terminated to `error`.
  uint64_t (*prepareSwitch)(const PlanView* plan, char* error, size_t errorCapacity);
  int (*switchPlan)(const PlanView* plan, char* error, size_t errorCapacity);
  uint64_t (*discardRetired)();
  // From now on the calling thread's allocations go to the C library, never to the pool (for the thread's
  // life): a thread working for the pool (adaptive mode's training worker) takes none of its memory, and
  // the iterations it judges count none of its allocations.
  void (*leaveThread)();
  // As Pool::trim (malloc_trim's share of the pool): returns the bytes given back.
  uint64_t (*trim)();
};

}  // namespace tp::preload

// Defined by the preload library only: the addon finds it with dlsym(RTLD_DEFAULT, ...) and gets null in a
// process that does not preload it.
extern "C" const tp::preload::ProcessPoolApi* tensorpool_process_pool(void);

#include "api_table.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "always_run.h"
#include "process_pool.h"
#include "stats_page.h"

#ifndef TP_PACKAGE_VERSION
#define TP_PACKAGE_VERSION "unknown"
#endif

namespace tp::preload {

namespace {

// Every entry runs inside the pool (its own allocations go to the C library), on the pool made by
// processPoolApi() before the table was handed out.
Pool& made() { return *madePool(); }

void apiStats(PoolStats* out) {
  InternalScope inside;
  *out = made().stats();
  publishStats(made(), Publish::Now);  // stats_page.h
}
size_t apiClassStats(ClassStats* out, size_t capacity) {
  InternalScope inside;
  const std::vector<ClassStats> classes = made().classStats();
  std::copy_n(classes.begin(), std::min(capacity, classes.size()), out);
  return classes.size();
}
uint64_t apiInterval() {
  InternalScope inside;
  return made().interval();
}
void apiMarkIteration(IterationSummary* out) {
  InternalScope inside;
  *out = made().markIteration();
  publishStats(made(), Publish::IfDue);  // stats_page.h
}
void apiStartRecording(uint64_t limit) {
  InternalScope inside;
  made().startRecording(limit);
}
void apiStopRecording() {
  InternalScope inside;
  made().stopRecording();
}
void apiRecordingState(RecordingState* out) {
  InternalScope inside;
  *out = made().recordingState();
}
size_t apiCopyRecording(uint64_t from, RecordedEvent* out, size_t capacity) {
  InternalScope inside;
  const std::vector<RecordedEvent> events = made().copyRecording(from);
  const size_t n = std::min(capacity, events.size());
  std::copy_n(events.begin(), n, out);
  return n;
}
void apiDiscardRecording(uint64_t before) {
  InternalScope inside;
  made().discardRecording(before);
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
  const uint64_t generation = made().prepareSwitch(planOf(view), &why);
  if (!generation) copyError(why, error, capacity);
  return generation;
}
int apiSwitchPlan(const PlanView* view, char* error, size_t capacity) {
  InternalScope inside;
  std::string why;
  if (made().switchPlan(planOf(view), &why)) return 1;
  copyError(why, error, capacity);
  return 0;
}
uint64_t apiDiscardRetired() {
  InternalScope inside;
  return made().discardRetired();
}
uint64_t apiTrim() { return poolTrim(); }
void apiLeaveThread() { enterPool(); }  // never undone: the thread is inside for the rest of its life

ProcessPoolApi table = {
    kProcessApiVersion, processApiLayout(), TP_PACKAGE_VERSION, nullptr, 0, nullptr, nullptr,
    apiStats, apiClassStats, apiInterval, apiMarkIteration, apiStartRecording, apiStopRecording, apiRecordingState,
    apiCopyRecording, apiDiscardRecording, apiPrepareSwitch, apiSwitchPlan, apiDiscardRetired, apiLeaveThread,
    apiTrim,
};

}  // namespace

TP_ALWAYS_RUN void describeProcess(const ProcessSettings& settings) {
  table.mode = settings.mode;
  table.minBytes = settings.minBytes;
  table.planPath = settings.planPath.empty() ? nullptr : settings.planPath.c_str();
  table.recordPath = settings.record ? settings.recordPath : nullptr;
}

const ProcessPoolApi* processPoolApi() { return poolReady() && servingPool() ? &table : nullptr; }

int markIterationFromC() {
  if (!poolReady() || !servingPool()) return 0;
  IterationSummary ended{};
  apiMarkIteration(&ended);
  if (ended.installed) apiDiscardRetired();  // a switch prepared by JS, installed here: free the old arena now
  return 1;
}

}  // namespace tp::preload

// The function table the addon reaches the process pool through (process_api.h states it), and the C API
// code without the addon calls (overrides.cc exports both).
#pragma once

#include "process_api.h"
#include "this_process.h"

namespace tp::preload {

// At start-up: what the table says of this process (its mode, threshold, plan and recording).
void describeProcess(const ProcessSettings& settings);

// tensorpool_process_pool(): the table, the pool made now if it is not yet; nullptr before start-up, where
// the configuration was bad, or where the pool could not be made.
const ProcessPoolApi* processPoolApi();

// tensorpool_mark_iteration(): an iteration mark for code without the addon (Python's sitecustomize under
// `tensorpool run`, through ctypes), as processPool().markIteration() in JS without adaptive mode's
// judgement (that lives in JS); a plan switch JS prepared and the mark installed gives the old arena's
// memory back now. 1 when it marked, 0 when this process has no serving pool.
int markIterationFromC();

}  // namespace tp::preload

// Reads a plan JSON file (lib/plan.ts writes them: "format": "tensorpool-plan", "version": 1) into the
// core's PlanSpec, for the process allocator, which runs before any JavaScript and so cannot use lib/.
#pragma once

#include <string>

#include "core/classes.h"

namespace tp::preload {

// Fills *plan from the file at `path`: interval, classes (sorted by size, schedule renumbered to match) and
// the schedule when present; *program: the program whose recording the plan was trained on
// (`source.program`, written by the preload library into its recordings), empty when it does not say.
// Returns false with *error naming the file and the field that is wrong; the class table itself (multiples
// of the interval, distinct sizes, schedule fits) is checked when the pool is built from it.
bool readPlanFile(const char* path, PlanSpec* plan, std::string* program, std::string* error);

}  // namespace tp::preload

// Reads a plan JSON file (lib/plan/plan.ts writes them: "format": "tensorpool-plan", versions 1 to 3) into the
// core's PlanSpec, for the process allocator, which runs before any JavaScript and so cannot use lib/.
#pragma once

#include <string>

#include "core/classes.h"

namespace tp::preload {

// Reads the plan file at `path`: first *program, the program whose recording the plan was trained on
// (`source.program`, written by the preload library into its recordings; empty when it does not say), and
// then, unless it names a program other than `running` (both non-empty: *plan is then left as it was, its
// body not even parsed), *plan: interval, classes (sorted by size, schedule renumbered to match) and the
// schedule when present; and *spans, whether the plan says the process pool serves from the default classes'
// spans ("serve": "spans", version 3) rather than from its blocks, with plan->spanReserve its "spans.reserve".
// The file must be a regular file of at most 256 MiB. Returns false with *error naming the file and what is
// wrong; the class table itself (multiples of the interval, distinct sizes, schedule fits) is checked here
// too, as the pool will when it is built from it.
bool readPlanFile(const char* path, const std::string& running, PlanSpec* plan, bool* spans, std::string* program,
                  std::string* error);

}  // namespace tp::preload

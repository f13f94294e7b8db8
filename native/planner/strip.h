// S2: static allocation as 2-D strip packing. Buffers are rectangles (lifetime across, size up); they are
// sorted by a metric and placed bottom-aligned in a container whose theoretical threshold is the lower
// bound; while the layout rises above it, the rectangles are classed by risk and reordered group by group.
#pragma once

#include <cstdint>

#include "planner/problem.h"
#include "planner/strategies.h"

namespace tp::planner {

// Starts from the greedy-by-size layout as the incumbent, so it never returns anything worse.
PlanResult stripPacking(const Problem& problem, uint64_t timeLimitMs, uint64_t startNs);

}  // namespace tp::planner

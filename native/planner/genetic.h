// S3: a genetic search over allocation orders, each order decoded by placing its buffers in turn (the
// "pre-allocation" of S3). Seeded with the classic orders, including greedy by size, so it never returns
// anything worse than that baseline.
#pragma once

#include <cstdint>

#include "planner/problem.h"
#include "planner/strategies.h"

namespace tp::planner {

PlanResult geneticSearch(const Problem& problem, uint64_t timeLimitMs, uint64_t seed, uint64_t startNs);

}  // namespace tp::planner

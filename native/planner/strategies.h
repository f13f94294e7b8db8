// planOffsets: one entry point for every planner, selected by name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/problem.h"

namespace tp::planner {

enum class Strategy : uint8_t { GreedySize, S1, S2, S3, Best };

struct PlanOptions {
  Strategy strategy = Strategy::Best;
  uint64_t timeLimitMs = 10000;  // S2, S3 and best stop searching by then and return the best found
  // Greedy by size and S1 stop at timeLimitMs too, with no layout (they have none to return before they
  // end): a caller that has a fallback bounds the time a huge problem may take.
  bool timeLimitsGreedy = false;
  uint64_t seed = 1;             // S3's generator
  // > 0: a lower bound the caller has proven (a relaxation's: the same buffers with fewer conflicts),
  // used instead of computing one. A graph's clique search can take seconds where a caller knows better.
  uint64_t knownLowerBound = 0;
};

struct PlanResult {
  std::vector<uint64_t> offsets;
  std::vector<uint32_t> order;  // greedy-size and s1: the order buffers were placed in
  uint64_t peak = 0;
  LowerBound lowerBound;
  bool optimal = false;      // peak proven minimal (it equals the lower bound, or the search proved it)
  uint64_t elapsedNs = 0;
  std::string notes;         // how the result was reached, for reports
};

// Pre: validate(problem) holds. Post: verify(problem, offsets) holds, or offsets is empty when
// timeLimitsGreedy stopped greedy by size or S1.
PlanResult planOffsets(const Problem& problem, const PlanOptions& options);

}  // namespace tp::planner

// Exact search for a layout within a capacity (the decision problem), after MiniMalloc (Moffitt, ASPLOS
// 2023). Only canonical layouts are enumerated: buffers are placed in increasing order of offset, each at
// the lowest offset its already-placed conflicting buffers allow (any layout can be pushed down into one).
// At each step the unplaced buffers whose offset would be lowest are the candidates; the search prunes when
// a section's floor plus the sizes still to place in it exceed the capacity, breaks symmetry between
// candidates that could be swapped, and skips identical buffers.
#pragma once

#include <cstdint>
#include <vector>

#include "planner/problem.h"

namespace tp::planner {

enum class SearchOutcome : uint8_t { Found, Infeasible, Aborted };

struct SearchLimits {
  uint64_t deadlineNs = UINT64_MAX;  // os::monotonicNs() time at which to give up
  uint64_t nodeBudget = UINT64_MAX;
};

struct SearchStats {
  uint64_t nodes = 0;
};

// Looks for offsets with every buffer's end <= capacity. `hint` (optional, one value per buffer; higher
// first) orders the candidates. On Found, *offsets holds a valid layout.
SearchOutcome searchWithin(const Problem& problem, uint64_t capacity, const SearchLimits& limits,
                           const std::vector<double>* hint, std::vector<uint64_t>* offsets, SearchStats* stats);

// Independent parts of an interval problem: groups of buffers whose lifetimes chain together. Each can be
// planned alone; the arena's height is the largest part's. Graph problems: connected components.
std::vector<std::vector<uint32_t>> partitions(const Problem& problem);

// The sub-problem of `buffers` (renumbered 0..k-1 in that order).
Problem subProblem(const Problem& problem, const std::vector<uint32_t>& buffers);

}  // namespace tp::planner

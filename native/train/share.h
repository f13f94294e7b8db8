// Time-shared blocks (issue 13): a class plan whose blocks may share memory when their uses never overlap
// in time. Each tensor is an item as large as its own class's block (header included) over its lifetime;
// an offset planner (greedy by size, issue 5) places the items; tensors of one class at one offset become
// one block, which the pool hands out only while no block sharing its memory is live. Where S0 gives every
// block memory of its own for the whole run, this needs about the most bytes live at once.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "train/train.h"

namespace tp {

struct SharedResult {
  PlanSpec plan;            // classes (own classes only: no tensor borrows), layout, schedule with blocks
  uint64_t arenaBytes = 0;  // the layout's height
  bool ok = false;          // false when the planner's layout did not keep 64-byte alignment (never expected),
                            // the conflicts were too many to plan as a graph, or the layout took too long
};

// Pairs of tensors (indices into the input) that must not share memory although their lifetimes do not
// overlap: a layout for an iteration that repeats keeps a tensor live across the boundary apart from
// those the next repetition allocates before freeing it.
using ExtraConflicts = std::vector<std::pair<uint32_t, uint32_t>>;

// Past this many conflicting pairs the layout is not tried as a graph (its neighbour lists would take
// more memory than the trace many times over).
constexpr uint64_t kMaxGraphConflicts = 8'000'000;

// Pre: input.count > 0, input.interval >= 1, every size > 0 and start < end. input.order and refine are
// ignored. plan.schedule[t] is tensor t's class and block. With searchMs > 0, when greedy by size ends more
// than 1% above the most bytes live at once, the planners' best search gets that long to do better.
// With `extra` not empty (indices < input.count), the layout is planned over the conflict graph: the pairs
// whose lifetimes overlap and these. Greedy by size visits, for each tensor, every placed one live beside
// it: a trace of hundreds of thousands with thousands live throughout (a process recorded from its start
// at a low threshold) takes minutes, so past `layoutMs` (> 0) the layout stops and fails.
SharedResult trainTimeShared(const TrainInput& input, uint64_t searchMs = 0, const ExtraConflicts& extra = {},
                             uint64_t layoutMs = 0);

}  // namespace tp

// Time-shared blocks (issue 13): a class plan whose blocks may share memory when their uses never overlap
// in time. Each tensor is an item as large as its own class's block (header included) over its lifetime;
// an offset planner (greedy by size, issue 5) places the items; tensors of one class at one offset become
// one block, which the pool hands out only while no block sharing its memory is live. Where S0 gives every
// block memory of its own for the whole run, this needs about the most bytes live at once.
#pragma once

#include <cstdint>

#include "train.h"

namespace tp {

struct SharedResult {
  PlanSpec plan;            // classes (own classes only: no tensor borrows), layout, schedule with blocks
  uint64_t arenaBytes = 0;  // the layout's height
  bool ok = false;          // false when the planner's layout did not keep 64-byte alignment (never expected)
};

// Pre: input.count > 0, input.interval >= 1, every size > 0 and start < end. input.order and refine are
// ignored. plan.schedule[t] is tensor t's class and block. With searchMs > 0, when greedy by size ends more
// than 1% above the most bytes live at once, the planners' best search (issue 5) gets that long to do better.
SharedResult trainTimeShared(const TrainInput& input, uint64_t searchMs = 0);

}  // namespace tp

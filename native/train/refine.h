// Beyond S0: lowers a trained size-class plan's arena by moving tensors between classes.
//
// A pool serves a class from any of its free blocks, so what a class needs is not S0's block-by-block
// placement but its peak: the most tensors assigned to it that live at once (blocks = peak is always
// enough: tensors of one class can be re-dealt to that many blocks by start time, an interval colouring).
// Each round takes the classes from the largest size down and tries to lower a class's peak by one: at
// every time its peak is reached, one tensor living then (the one living longest) moves to another class
// at least its own size that has room throughout its lifetime, so that no other peak rises. A round that
// cannot clear every peak time is undone. The plan never grows: its classes end with blocks = peak, which
// is at most what S0 gave them.
#pragma once

#include <cstdint>

#include "train/train.h"

namespace tp {

struct RefineLimits {
  uint64_t maxTreeBytes = uint64_t{64} << 20;  // the per-class time trees together; above it, no refinement
  uint64_t budgetNs = 200'000'000;             // stop (keeping what was gained) after this long
};

// Refines *result (trained from `input` by trainSizeClasses) in place: classes, schedule, borrows, and
// blockOf (re-dealt per class). Returns false, leaving *result as it was, when the trace is too large for
// the limits.
bool refineClasses(const TrainInput& input, TrainResult* result, const RefineLimits& limits = RefineLimits{});

}  // namespace tp

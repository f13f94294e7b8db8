// Plan training (S0 step 2): place every tensor of a recorded iteration into size-class cache blocks so
// that tensors sharing a block never live at the same time; the classes and their block counts are the
// plan a pool is built from.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/classes.h"

namespace tp {

enum class TrainOrder : uint8_t { AllocTime, SizeDescending };

struct TrainInput {
  const double* sizes;   // bytes, > 0
  const double* starts;  // lifetime [start, end): allocation time ...
  const double* ends;    // ... and release time (the trace's length for tensors never released)
  size_t count;
  uint64_t interval;     // >= 1
  TrainOrder order;
  bool refine = false;   // then refineClasses (refine.h) after S0
};

struct TrainResult {
  PlanSpec plan;              // classes ascending by size, each with >= 1 block; schedule in input order
  uint64_t borrows = 0;       // tensors placed in a block of a larger class than their own
  std::vector<uint32_t> blockOf;  // per tensor: the block it was placed in (index over all blocks)
  bool refined = false;           // refineClasses ran (asked for, and within its limits)
  std::vector<PlanClass> literal; // with refine: S0's own classes, before refinement
};

// S0, literally: round each size up to the interval to name its class; visit tensors in the chosen order;
// put each in a block of its own class whose history has no lifetime conflict, else in the first such
// block of the larger classes (ascending), else in a new block of its own class. plan.schedule[t] is
// where tensor t went: pass tensors in allocation order and it is the pool's schedule.
//
// Conflict checks never scan a history. In allocation-time order every tensor already placed started no
// later than the current one, so a block is free for it exactly when the last lifetime it holds has ended;
// each class keeps its blocks in a heap by that end, and a tree over the classes finds the first larger
// class holding such a block in O(log classes). In size order a block keeps its history as an ordered set
// of lifetimes and answers "is [start, end) free?" in O(log history).
//
// With input.refine, S0's plan is then refined (refine.h); `literal` keeps what S0 gave.
TrainResult trainSizeClasses(const TrainInput& input);

// One trainSizeClasses run per interval (input.interval is ignored), spread over up to `threads` threads.
// results[i] belongs to intervals[i]; elapsedNs[i] is its own running time.
void trainEachInterval(const TrainInput& input, const std::vector<uint64_t>& intervals, unsigned threads,
                       std::vector<TrainResult>* results, std::vector<uint64_t>* elapsedNs);

}  // namespace tp

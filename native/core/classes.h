// Size classes (S0): the sorted class sizes of a plan and the O(1) lookup from a request size to the first
// class that can hold it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace tp {

struct PlanClass {
  uint64_t size;    // bytes per block; a multiple of the plan's interval
  uint64_t blocks;  // blocks carved up front
};

// Where training put the k-th allocation: the pool serves it from that class when the run repeats the
// recorded sequence (same size at the same position), so it realises training's placement exactly.
struct ScheduleEntry {
  uint64_t size;        // bytes the k-th allocation asked for
  uint32_t classIndex;  // index into the plan's classes, sorted by size
  uint32_t block = kAnyBlock;  // time-shared plans: the block (index into PlanSpec::layout) it went to
  static constexpr uint32_t kAnyBlock = UINT32_MAX;
};

// Time-shared blocks (issue 13): a block placed at an offset of its own in the arena. Blocks whose ranges
// [offset, offset + stride) intersect share memory: training put them there because their uses never
// overlap in time, and the pool hands one out only while no block sharing its memory is live.
struct PlacedBlock {
  uint32_t classIndex;  // index into the plan's classes, sorted by size
  uint64_t offset;      // of the block's header from the arena's start; a multiple of 64
};

struct PlanSpec {
  // Sizes are rounded up to a multiple of `interval` to name their class (S0 step 2). 0 means the classes
  // are not on an interval grid (the default classes): a request's own class is then the first class that
  // holds it.
  uint64_t interval = 0;
  std::vector<PlanClass> classes;
  std::vector<ScheduleEntry> schedule;  // optional
  // Where each trained iteration's entries begin in `schedule` (ascending, the first 0); empty means one
  // iteration. The pool follows the schedule of the iteration it is in, or the one whose sizes the run
  // matches (Pool::alloc).
  std::vector<uint64_t> iterationStarts;
  // How many of the last iterations repeat, in turn, once the run is past them (1: see Schedules::begin).
  // A recorded cycle of p input shapes repeats p; a tensor that lives longer than one iteration needs a
  // block of its own in each of two iterations in a row, so its plan repeats two.
  uint64_t cycle = 1;
  // Optional: every block of the plan at its offset, blocks of one class counted as `classes` says. Empty:
  // blocks are carved one after another and never share memory.
  std::vector<PlacedBlock> layout;
  // Growth::Spans (a trained plan of the spans kind, lib/plan/train.ts): bytes carved at creation as one free
  // span, whose pages decay and trim leave resident once written after the first iteration mark (start-up's
  // passing buffers are given back as ever): the recording's working set as the spans held it, so that the
  // run does not fault it in again after an idle while. Not pre-faulted: what the program never writes stays
  // out of its RSS. 0: none. Other growth modes ignore it.
  uint64_t spanReserve = 0;
};

// The classes a pool uses when it is given no plan: 64 B, then four classes per doubling from 128 B up to
// 64 MiB (128, 160, 192, 224, 256, 320, ...), with no blocks carved up front: a growing pool carves them on
// first use. Internal waste is below 25% of a request in its own class, below 50% in a block lent to it
// (SizeClassPool lends a block of up to four classes up before it grows a class).
PlanSpec defaultPlan();

class SizeClassTable {
 public:
  // Validates the plan (class sizes > 0, distinct, multiples of the interval, at most 65535 classes; every
  // schedule entry names a class that holds its size, and with a layout a block of that class; the layout
  // has as many blocks per class as the plan, at 64-byte multiples; iteration starts ascend within the
  // schedule; the cycle is 1 to their number) and builds the lookup. Returns false with *error
  // naming the class or entry.
  bool build(const PlanSpec& plan, std::string* error);

  size_t count() const { return sizes_.size(); }
  uint64_t size(size_t index) const { return sizes_[index]; }
  uint64_t interval() const { return interval_; }
  uint64_t largest() const { return sizes_.empty() ? 0 : sizes_.back(); }

  // The first class whose size is >= bytes, or -1 when bytes is above every class.
  int firstFitting(uint64_t bytes) const {
    if (bytes == 0 || bytes > largest()) return -1;
    const size_t q = (bytes - 1) >> granuleShift_;
    const size_t i = lut_[q];
    if (sizes_[i] >= bytes) return static_cast<int>(i);
    // Further into the granule: bisected up to the class that holds the next granule's smallest request.
    const size_t last = q + 1 < lut_.size() ? lut_[q + 1] : sizes_.size() - 1;
    return static_cast<int>(std::lower_bound(sizes_.begin() + i + 1, sizes_.begin() + last, bytes) - sizes_.begin());
  }
  // Whether class `index` is the request's own class: its size is the request rounded up to the interval
  // (or, without an interval, it is the first class that fits).
  bool isOwn(size_t index, uint64_t bytes) const {
    if (interval_ == 0) return static_cast<int>(index) == firstFitting(bytes);
    return sizes_[index] == (bytes + interval_ - 1) / interval_ * interval_;
  }

 private:
  uint64_t interval_ = 0;
  std::vector<uint64_t> sizes_;
  // lut_[q] = the first class that holds q * granule + 1 bytes, the smallest request of granule q; the
  // granule is at most the class spacing (the class found at once, or a step on) unless that would make the
  // table longer than 4Ki entries (8 KiB): a longer one would be resident in every process whose pool was
  // made, however little it asks of the pool.
  unsigned granuleShift_ = 0;
  std::vector<uint16_t> lut_;
};

}  // namespace tp

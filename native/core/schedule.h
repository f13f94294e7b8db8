// Following a plan's schedule (issue 13): a trained plan holds one schedule per trained iteration (several
// traces, or several iterations of one); a run follows the schedule of the iteration it is in (past the
// last, as begin() says) while the sizes it asks for match, and otherwise the first schedule whose sizes so
// far equal the run's, so one plan serves a cycle of input shapes in any order.
#pragma once

#include <cstdint>
#include <vector>

#include "core/classes.h"

namespace tp {

// The schedules of a plan, with a hash of each prefix of sizes for the search.
class Schedules {
 public:
  Schedules() = default;
  // Pre: the plan passed SizeClassTable::build (iteration starts ascend within the schedule).
  explicit Schedules(const PlanSpec& plan);

  // Where one iteration stands: reset at each mark, advanced by each allocation.
  struct Cursor {
    uint64_t iteration = 0;  // marks since the plan began serving
    uint64_t position = 0;   // allocations since the mark (strays left out)
    uint64_t hash = 0;       // of the sizes asked for since the mark (strays left out)
    uint64_t at = 0;         // the entry expected next; past a schedule's end, the next schedule's first
                             // (a run that does not mark its iterations goes on as the trace did)
    bool lost = false;       // the run has stopped following any schedule this iteration
    uint32_t strays = 0;     // allocations in a row that no schedule entry matched
    bool reordered = false;  // an entry was taken ahead of `at`: the run's order departs from the trace's
    bool startUp = false;    // the first iteration of a pool made with its plan: the process's start-up
    std::vector<uint64_t> ahead;   // entries at or after `at` already taken out of order
    std::vector<uint64_t> passed;  // entries before `at` stepped over as missing and not taken since
  };
  // Starts iteration `iteration` (0 for the first after the plan began serving). Past the trained
  // iterations, a plan whose cycle is 1 follows the iteration that ended (`endedSizes`: the sum of mix64
  // over its requested sizes, `endedCount` of them) with the schedule that followed the latest trained
  // iteration of that multiset of sizes, if one did: a run that goes on cycling through input shapes after
  // the recording continues the recording's cycle. Otherwise the last `cycle` schedules in turn.
  void begin(Cursor* cursor, uint64_t iteration, uint64_t endedSizes = 0, uint64_t endedCount = 0) const;
  // The entry for the next allocation, of `bytes`, or nullptr when no schedule has one for it.
  // Threads that allocate side by side (a runtime loading weights in parallel) change the order, not the
  // sizes: an allocation that is not the entry expected takes the first entry of its size within the next
  // kLookahead that no allocation has taken yet, unless another schedule's sizes so far are the run's in
  // order (another input shape) -- in a start-up (Cursor::startUp), even then. One that no entry matches (a
  // thread or a one-off buffer the recording did not have) misses alone; after kStrays such in a row the run
  // follows no schedule until the next mark (it has left the trained patterns: searching on would cost every
  // allocation). An expected entry that kMissingAfter allocations have passed, taken ahead of it, is one the
  // run does not make (a recording's one-off buffer): the cursor steps over it, and should its size come
  // after all (a longer reordering), the allocation still takes it.
  const ScheduleEntry* next(Cursor* cursor, uint64_t bytes) const;
  static constexpr uint64_t kLookahead = 256;
  static constexpr uint32_t kStrays = 16;
  static constexpr size_t kMissingAfter = 16;
  // The entries next() returns next while the run asks for their sizes in order, at most `max` of them
  // into `out`; how many. None once the run is lost.
  size_t upcoming(const Cursor& cursor, const ScheduleEntry** out, size_t max) const;
  bool empty() const { return entries_.empty(); }
  // Whether a front cache may keep the block once the allocation at `entry` (one of these schedules') is
  // released. Blocks of one class are interchangeable; a time-shared plan's named block only where the
  // schedule names it again before any block sharing its memory (held in a cache it keeps them busy).
  bool keeps(const ScheduleEntry* entry) const {
    return keeps_.empty() || keeps_[static_cast<size_t>(entry - entries_.data())];
  }
  // Time-shared plans: works out keeps() in the order a run that marks no iteration takes the entries (the
  // schedules in turn, then the repeating ones again). `sharing[b]`: the blocks sharing block b's memory.
  // Pre: every named block is < sharing.size().
  void markKeeps(const std::vector<std::vector<uint32_t>>& sharing);

 private:
  uint64_t length(size_t s) const { return starts_[s + 1] - starts_[s]; }
  // Takes the first entry of `bytes` after `at` (within kLookahead) not taken yet, or nullptr.
  const ScheduleEntry* takeAhead(Cursor* cursor, uint64_t at, uint64_t bytes) const;
  // Moves `at` past the entries taken out of order that it has reached.
  void stepOverTaken(Cursor* cursor) const;
  // Takes the first passed entry of `bytes`, or nullptr.
  const ScheduleEntry* takePassed(Cursor* cursor, uint64_t bytes) const;

  std::vector<ScheduleEntry> entries_;
  std::vector<uint64_t> starts_;    // schedule s is entries_[starts_[s], starts_[s + 1])
  uint64_t cycle_ = 1;              // PlanSpec::cycle
  std::vector<uint64_t> prefixes_;  // per entry: the hash of its schedule's sizes up to and including it
  std::vector<uint64_t> multisets_;  // per schedule: the sum of mix64 over its sizes (Pool's sizeHash)
  // Per entry, apart from the entries: they are read on every allocation, and 16 bytes each fit 4 a line.
  std::vector<uint8_t> keeps_;
};

}  // namespace tp

// Decay's clock: when free memory that has sat idle is to go back to the OS. A pure model (as jemalloc's
// decay.c): it is told the time and the iteration marks, and says when an epoch ends; it makes no system call,
// reads no clock and touches no memory. The pool (core/pool.h) asks it at each of its turns, and its purge
// (core/purge.h) gives back what the classes found idle across the epochs that ended.
//
// An epoch ends once it has lasted the period and, where the program marks iterations, has seen kMarks marks
// (or the marks have stopped for longer than the period and twice the longest iteration), so that memory a
// program reuses every iteration, or every few, is never idle for a whole epoch, however slow the machine.
// Where memory given back was soon handed out again (rewarmed), the period and its marks double, up to kMaxScale
// times; after kQuietEpochs epochs in a row without, they halve.
//
// Times are nanoseconds on one monotonic clock (the pool's: PoolOptions::clock); values from two clocks never
// meet here. Not thread-safe: the pool's lock serialises it.
#pragma once

#include <cstdint>

namespace tp {

class DecayModel {
 public:
  static constexpr uint64_t kNever = UINT64_MAX;  // a period of kNever: decay is off
  static constexpr uint64_t kMarks = 16;
  static constexpr uint64_t kMaxScale = 64;
  static constexpr uint64_t kQuietEpochs = 8;

  // An epoch of `periodMs` (kNever: off) starts at `now`.
  DecayModel(uint64_t periodMs, uint64_t now) : periodMs_(periodMs), epochStart_(now), lastMark_(now) { periodNs_ = scaledPeriodNs(); }

  bool on() const { return periodMs_ != kNever; }
  // The period now (the configured one times the scale), in milliseconds and nanoseconds (saturating).
  uint64_t periodMs() const;
  uint64_t periodNs() const { return periodNs_; }
  uint64_t scale() const { return scale_; }

  // An iteration mark at `now`; `first`: the program's first (no iteration ended at it).
  void mark(uint64_t now, bool first);
  // Whether the epoch under way has lasted its period by `now`: what epochEnded() asks first, inline for the
  // pool's every alloc and release. Pre: on().
  bool periodPassed(uint64_t now) const { return now - epochStart_ >= periodNs_; }
  // Whether the epoch under way has ended by `now`. Pre: on().
  bool epochEnded(uint64_t now) const;
  // The next epoch starts at `now`; `rewarmed`: memory given back was handed out again during the one that
  // ended (the scale doubles; after kQuietEpochs without, it halves).
  void startEpoch(uint64_t now, bool rewarmed);

 private:
  uint64_t scaledPeriodNs() const;  // periodMs() in nanoseconds (saturating)

  uint64_t periodMs_;
  uint64_t periodNs_ = 0;  // scaledPeriodNs(), kept: the scale changes only when an epoch starts
  uint64_t epochStart_;
  uint64_t lastMark_;
  uint64_t epochMarks_ = 0;
  uint64_t longestIteration_ = 0;  // the longest time between two marks so far
  uint64_t scale_ = 1;             // the period's multiple (1 to kMaxScale)
  uint64_t quietEpochs_ = 0;       // epochs in a row in which no given-back memory was handed out again
};

}  // namespace tp

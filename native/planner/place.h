// Placement: buffers in a given order, each at an offset among the buffers already placed that conflict
// with it. The decoder every order-based planner shares (greedy by size, S1, S2, S3).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "planner/problem.h"

namespace tp::planner {

enum class Fit : uint8_t {
  First,  // the lowest offset where it fits (S1's reuse, S2's bottom alignment)
  Best,   // the smallest gap that holds it (TFLite / XLA), else on top of the highest
};

constexpr uint64_t kUnplaced = UINT64_MAX;

// A second thread that runs one task at a time alongside the caller, handed over by spinning on an atomic
// (each task lasts tens of microseconds, too short to sleep and wake for).
class HelperThread {
 public:
  HelperThread();
  ~HelperThread();
  // Offers task(context) to the helper; the caller must wait() before offering another.
  void start(void (*task)(void*), void* context);
  // Returns once the task has run: on the helper, or here where the helper had not taken it yet (on a busy
  // machine the helper may not be scheduled for a while: the caller then never waits for it to be).
  void wait();

 private:
  void loop();
  std::atomic<int> state_{0};  // 0 idle, 1 task offered, 4 taken by the helper, 2 task done, 3 stop
  void (*task_)(void*) = nullptr;
  void* context_ = nullptr;
  std::thread thread_;
};

// Owns a ConflictIndex whose placed marks follow the offsets it places, so each placement visits only
// the placed buffers that conflict with it. On large interval problems, with a second core, each query
// is split in halves between the caller and a helper thread.
class Placer {
 public:
  explicit Placer(const Problem& problem);
  ~Placer();

  // Places every buffer of `order` (a permutation of all buffers) and returns the offsets; an empty vector
  // when os::monotonicNs() passes `deadlineNs` first (checked every 1024 buffers).
  std::vector<uint64_t> place(const std::vector<uint32_t>& order, Fit fit, uint64_t deadlineNs = UINT64_MAX);
  // Incremental use over one `offsets` vector: reset() adopts it (placed where not kUnplaced), then put()
  // places one more buffer and take() removes one, keeping the index in step.
  void reset(const std::vector<uint64_t>& offsets);
  uint64_t put(uint32_t b, Fit fit, std::vector<uint64_t>& offsets);
  void take(uint32_t b, std::vector<uint64_t>& offsets);
  // The offset `fit` chooses for buffer b given `offsets`. Interval problems: the index's placed marks must
  // match `offsets` (place, reset, put and take keep them so).
  uint64_t offsetFor(uint32_t b, Fit fit, const std::vector<uint64_t>& offsets);

 private:
  void mark(uint32_t b, bool placed, uint64_t offset);

  const Problem& problem_;
  ConflictIndex index_;
  std::vector<std::pair<uint64_t, uint64_t>> busy_, scratch_;  // [offset, end) of placed conflicting buffers
  // With a helper: index_ and helperIndex_ each hold every other buffer (by rank); the helper queries its own.
  std::unique_ptr<HelperThread> helper_;
  std::unique_ptr<ConflictIndex> helperIndex_;
  std::vector<std::pair<uint64_t, uint64_t>> helperBusy_, helperScratch_;
  uint32_t helperQuery_ = 0;
};

// The search's first descent, without backtracking: repeatedly places the unplaced buffer whose lowest
// viable offset (the top of the placed buffers it conflicts with) is lowest, ties by `rank` (lower first),
// at that offset. Layouts are canonical: nothing is placed above a gap a remaining buffer could fill.
// O(E log n) with a heap of (offset, rank) and lazy updates.
// Empty when os::monotonicNs() passes `deadlineNs` first.
std::vector<uint64_t> placeLowestFirst(const Problem& problem, const std::vector<uint32_t>& rank,
                                       uint64_t deadlineNs = UINT64_MAX);

// An allocator run over time (interval problems): buffers placed as their lifetimes start, each in the
// smallest free range that holds it, else at the top; ranges freed as lifetimes end, merged with their
// neighbours (a range that reaches the top lowers it). O(n log n) whatever the conflicts, so it bounds
// the time to a first layout where the conflict-driven constructors would visit billions of pairs (a
// buffer live throughout a recording of a million). Empty for graph problems.
std::vector<uint64_t> placeOnline(const Problem& problem);

// Orders by a key, descending, ties by longer lifetime, then earlier start, then index: deterministic.
std::vector<uint32_t> orderBy(const Problem& problem, const std::vector<double>& key);
std::vector<uint32_t> sizeOrder(const Problem& problem);

}  // namespace tp::planner

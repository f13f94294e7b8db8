// Static memory planning problems: place every buffer at an offset in one arena so that buffers that
// conflict (live at the same time, or joined by an explicit conflict edge) never overlap in address; the
// arena's height (the highest end) is what planners minimise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tp::planner {

struct Problem {
  std::vector<uint64_t> size;
  // Interval problems: half-open lifetimes [lower, upper). Buffers conflict when their lifetimes overlap.
  std::vector<uint64_t> lower, upper;
  // Graph problems (S1): sorted neighbour lists; empty for interval problems.
  std::vector<std::vector<uint32_t>> neighbours;

  size_t count() const { return size.size(); }
  bool isGraph() const { return !neighbours.empty() || (lower.empty() && !size.empty()); }
  bool conflict(uint32_t a, uint32_t b) const;
  // How much of the problem a buffer spans, for the heuristics' orders: its lifetime's length, or (graphs)
  // one more than its number of conflicts.
  double width(uint32_t b) const {
    return isGraph() ? static_cast<double>(neighbours[b].size() + 1) : static_cast<double>(upper[b] - lower[b]);
  }
};

// Checks shapes and values: sizes > 0, lower < upper, neighbour indices in range and symmetric, no self
// edges. Returns false with *error naming the buffer.
bool validate(const Problem& problem, std::string* error);

// The time axis cut where the set of live buffers changes: section s is [times[s], times[s + 1]); buffer b
// covers sections first[b] ..= last[b]. Interval problems only.
struct Sections {
  std::vector<uint64_t> times;
  std::vector<uint32_t> first, last;
  size_t count() const { return times.empty() ? 0 : times.size() - 1; }
};
Sections buildSections(const Problem& problem);
// Bytes live in each section (the sum of the sizes of the buffers spanning it).
std::vector<uint64_t> sectionLoads(const Problem& problem, const Sections& sections);

// Finds, for a buffer, the buffers whose lifetimes overlap its own, in O(k log n): buffers sorted by lower,
// with a max-tree of upper over that order. Graph problems use their neighbour lists instead.
//
// It can also keep track of which buffers are placed (markPlaced) so that forEachPlacedConflict skips
// subtrees holding none: a planner placing buffers one by one then visits each conflicting pair once.
class ConflictIndex {
 public:
  explicit ConflictIndex(const Problem& problem);
  // Calls fn(c) for every c != b that conflicts with b.
  template <typename Fn>
  void forEachConflict(uint32_t b, Fn&& fn) const {
    if (graph_) {
      for (uint32_t c : problem_.neighbours[b]) fn(c);
      return;
    }
    visit<false>(1, 0, leaves_, problem_.lower[b], problem_.upper[b], b, fn);
  }
  // Appends [offset, offset + size) of every buffer marked placed that conflicts with b. Interval problems
  // only: the hot loop of the greedy planners, kept to sequential memory (leaf-ordered copies).
  void collectPlacedBusy(uint32_t b, std::vector<std::pair<uint64_t, uint64_t>>& out) const;
  // Marks b placed at `offset` (or unplaced). Interval problems only; a no-op for graphs and for buffers
  // outside this index's part.
  void markPlaced(uint32_t b, bool placed, uint64_t offset = 0);

  // An index over one part of the buffers: those whose rank by lower is `part` modulo `parts`. Every
  // time window holds about as many buffers of each part, so `parts` indexes split any query evenly.
  ConflictIndex(const Problem& problem, unsigned part, unsigned parts);

 private:
  template <bool PlacedOnly, typename Fn>
  void visit(size_t node, size_t lo, size_t hi, uint64_t from, uint64_t to, uint32_t self, Fn& fn) const {
    if (lo >= count_ || maxUpper_[node] <= from || sortedLower_[lo] >= to) return;
    if (PlacedOnly && placed_[node] == 0) return;
    if (hi - lo == 1) {
      const uint32_t c = order_[lo];
      if (c != self) fn(c);
      return;
    }
    const size_t mid = (lo + hi) / 2;
    visit<PlacedOnly>(2 * node, lo, mid, from, to, self, fn);
    visit<PlacedOnly>(2 * node + 1, mid, hi, from, to, self, fn);
  }

  void collect(size_t node, size_t lo, size_t hi, uint64_t from, uint64_t to, uint32_t self,
               std::vector<std::pair<uint64_t, uint64_t>>& out) const;

  const Problem& problem_;
  bool graph_;
  size_t count_ = 0, leaves_ = 1;
  std::vector<uint32_t> order_;        // buffers by lower
  std::vector<uint64_t> sortedLower_;  // lower of order_[i]
  std::vector<uint32_t> leafOf_;       // buffer -> its position in order_ (UINT32_MAX: not in this part)
  std::vector<uint64_t> maxUpper_;     // over the subtree's leaves
  std::vector<uint32_t> placed_;       // placed buffers in the subtree
  std::vector<std::pair<uint64_t, uint64_t>> leafBusy_;  // [offset, end) of the buffer at each position
};

struct LowerBound {
  uint64_t value = 0;
  bool exact = true;  // graphs: false when the clique search was cut short (value is then a clique found)
};
// Intervals: the most bytes live at once (max section load). Graphs: the heaviest clique (a branch and
// bound, exact for small graphs; for larger ones the heaviest clique found within a node budget).
LowerBound lowerBound(const Problem& problem);

// Proves a layout valid: offsets for every buffer, and no two conflicting buffers overlap in address.
// Intervals: a sweep over time with the live buffers ordered by offset (O(n log n)); graphs: every edge.
// Returns false with *why naming two buffers that overlap.
bool verify(const Problem& problem, const std::vector<uint64_t>& offsets, std::string* why);

uint64_t heightOf(const Problem& problem, const std::vector<uint64_t>& offsets);

}  // namespace tp::planner

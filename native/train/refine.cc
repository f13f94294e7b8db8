#include "train/refine.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <queue>
#include <utility>

#include "os/os.h"

namespace tp {

namespace {

// Tensors of one class alive at each point in (compressed) time: range add, range max, and the first
// point at or after x where the count reaches a value.
class CountTree {
 public:
  explicit CountTree(size_t points) {
    while (size_ < points) {
      size_ <<= 1;
      height_++;
    }
    max_.assign(2 * size_, 0);
    add_.assign(2 * size_, 0);
  }
  // Bottom-up (the refinement asks millions of these): the nodes that cover [from, to), then their
  // ancestors rebuilt.
  void add(size_t from, size_t to, int32_t delta) {
    if (from >= to) return;
    size_t l = from + size_, r = to + size_;
    const size_t l0 = l, r0 = r - 1;
    for (; l < r; l >>= 1, r >>= 1) {
      if (l & 1) apply(l++, delta);
      if (r & 1) apply(--r, delta);
    }
    rebuild(l0);
    rebuild(r0);
  }
  // The adds pending above the two boundary leaves are pushed down first, so that every node the query
  // reads holds its whole subtree's count.
  int32_t max(size_t from, size_t to) {
    if (from >= to) return INT32_MIN / 2;
    size_t l = from + size_, r = to + size_;
    pushDown(l);
    pushDown(r - 1);
    int32_t result = INT32_MIN / 2;
    for (; l < r; l >>= 1, r >>= 1) {
      if (l & 1) result = std::max(result, max_[l++]);
      if (r & 1) result = std::max(result, max_[--r]);
    }
    return result;
  }
  int32_t peak() const { return max_[1]; }
  // The first point >= from whose count is >= value, or -1.
  long firstAtLeast(size_t from, int32_t value) const { return first(1, 0, size_, from, value, 0); }

  static uint64_t bytesFor(size_t points) {
    size_t size = 1;
    while (size < points) size <<= 1;
    return uint64_t{2} * size * 2 * sizeof(int32_t);
  }

 private:
  // Node p's subtree gains delta: its max at once, its children through add_ (leaves have none).
  void apply(size_t p, int32_t delta) {
    max_[p] += delta;
    if (p < size_) add_[p] += delta;
  }
  void rebuild(size_t p) {
    while (p > 1) {
      p >>= 1;
      max_[p] = std::max(max_[2 * p], max_[2 * p + 1]) + add_[p];
    }
  }
  void pushDown(size_t leaf) {
    for (unsigned s = height_; s > 0; --s) {
      const size_t p = leaf >> s;
      if (add_[p] == 0) continue;
      apply(2 * p, add_[p]);
      apply(2 * p + 1, add_[p]);
      add_[p] = 0;
    }
  }
  // `above`: what the ancestors add to this subtree.
  long first(size_t node, size_t lo, size_t hi, size_t from, int32_t value, int32_t above) const {
    if (hi <= from || max_[node] + above < value) return -1;
    if (hi - lo == 1) return static_cast<long>(lo);
    const size_t mid = (lo + hi) / 2;
    const int32_t below = above + add_[node];
    const long left = first(2 * node, lo, mid, from, value, below);
    return left >= 0 ? left : first(2 * node + 1, mid, hi, from, value, below);
  }

  size_t size_ = 1;
  unsigned height_ = 0;       // levels above the leaves
  std::vector<int32_t> max_;  // max over the subtree, its own pending add included
  std::vector<int32_t> add_;  // added to the whole subtree, not yet to its children's max_ (internal nodes)
};

struct Move {
  uint32_t tensor, from, to;
};

class Refiner {
 public:
  Refiner(const TrainInput& in, const TrainResult& trained) : in_(in) {
    for (const PlanClass& c : trained.plan.classes) sizes_.push_back(c.size);
    // Compress time to the distinct starts: counts only rise at a start, so a class's peak (and the most it
    // holds over a lifetime) is reached at one. A tensor holds the starts in [first_, last_): its own and
    // those before its end.
    std::vector<double> points(in.starts, in.starts + in.count);
    std::sort(points.begin(), points.end());
    points.erase(std::unique(points.begin(), points.end()), points.end());
    points_ = points.size();
    const auto rank = [&](double t) { return static_cast<uint32_t>(std::lower_bound(points.begin(), points.end(), t) - points.begin()); };
    first_.resize(in.count);
    last_.resize(in.count);
    fit_.resize(in.count);
    class_.resize(in.count);
    for (size_t t = 0; t < in.count; ++t) {
      first_[t] = rank(in.starts[t]);
      // A lifetime holds its own start; an empty one [s, s) too, as a pool must still find it a block.
      last_[t] = std::max(rank(in.ends[t]), first_[t] + 1);
      fit_[t] = static_cast<uint32_t>(std::lower_bound(sizes_.begin(), sizes_.end(), roundedSize(t)) - sizes_.begin());
      class_[t] = trained.plan.schedule[t].classIndex;
    }
  }

  uint64_t roundedSize(size_t t) const {
    return (static_cast<uint64_t>(in_.sizes[t]) + in_.interval - 1) / in_.interval * in_.interval;
  }

  // What the time trees take at most, before any is built: the distinct starts are at most the tensors.
  static uint64_t treeBytesAtMost(const TrainInput& in, const TrainResult& trained) {
    return CountTree::bytesFor(in.count) * trained.plan.classes.size();
  }

  void run(uint64_t budgetNs) {
    const uint64_t deadline = os::monotonicNs() + budgetNs;
    trees_.assign(sizes_.size(), CountTree(points_));
    members_.assign(sizes_.size(), {});
    for (uint32_t t = 0; t < in_.count; ++t) {
      trees_[class_[t]].add(first_[t], last_[t], 1);
      members_[class_[t]].push_back(t);
    }
    for (bool progress = true; progress;) {
      progress = false;
      for (size_t c = sizes_.size(); c-- > 0;) {
        while (trees_[c].peak() > 0 && os::monotonicNs() < deadline && lowerPeak(static_cast<uint32_t>(c))) progress = true;
      }
    }
  }

  // The refined plan: classes with blocks = peak (empty ones dropped), the schedule, borrows, and blocks
  // re-dealt per class by start time.
  void write(TrainResult* result) const {
    std::vector<uint32_t> renumber(sizes_.size(), UINT32_MAX);
    result->plan.classes.clear();
    for (size_t c = 0; c < sizes_.size(); ++c) {
      const int32_t peak = trees_[c].peak();
      if (peak <= 0) continue;
      renumber[c] = static_cast<uint32_t>(result->plan.classes.size());
      result->plan.classes.push_back({sizes_[c], static_cast<uint64_t>(peak)});
    }
    result->borrows = 0;  // as S0 and the pool count them: a class other than the size rounded to the interval
    for (size_t t = 0; t < in_.count; ++t) {
      result->plan.schedule[t].classIndex = renumber[class_[t]];
      if (sizes_[class_[t]] != roundedSize(t)) ++result->borrows;
    }
    // Interval colouring per class in start order: a block is free once the last lifetime it held ended.
    std::vector<uint32_t> order(in_.count);
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return first_[a] < first_[b]; });
    using Entry = std::pair<uint32_t, uint32_t>;  // (end of the last lifetime held, block)
    std::vector<std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>>> free(sizes_.size());
    uint32_t blocks = 0;
    std::vector<uint32_t> firstBlock(sizes_.size(), 0);
    for (size_t c = 0; c < sizes_.size(); ++c) {
      firstBlock[c] = blocks;
      blocks += static_cast<uint32_t>(std::max(0, trees_[c].peak()));
    }
    std::vector<uint32_t> dealt(sizes_.size(), 0);
    for (uint32_t t : order) {
      const uint32_t c = class_[t];
      uint32_t block;
      if (!free[c].empty() && free[c].top().first <= first_[t]) {
        block = free[c].top().second;
        free[c].pop();
      } else {
        block = firstBlock[c] + dealt[c]++;  // dealt[c] never exceeds the peak: colouring by start is optimal
      }
      free[c].push({last_[t], block});
      result->blockOf[t] = block;
    }
  }

 private:
  // One block fewer for class c: at every point where c reaches its peak, move one tensor living there
  // elsewhere: to a class with room, else to a smaller class given one block more, as long as the blocks
  // added cost less than the one taken away. All or nothing.
  bool lowerPeak(uint32_t c) {
    const int32_t peak = trees_[c].peak();
    const std::vector<uint32_t>& members = members_[c];
    // The peak points only move forward: the members living at each are found by a sweep over the members
    // in start order. A member is named by its position in `members`, which breaks ties as a scan of
    // `members` in order would.
    std::vector<uint32_t> byStart(members.size());
    std::iota(byStart.begin(), byStart.end(), 0u);
    std::stable_sort(byStart.begin(), byStart.end(), [&](uint32_t a, uint32_t b) { return first_[members[a]] < first_[members[b]]; });
    std::vector<uint32_t> started, living;  // positions: started by the point, and of those living at it in c
    size_t next = 0;
    std::vector<Move> moves;
    uint64_t added = 0;  // bytes of the blocks other classes gained in this round
    for (long p = trees_[c].firstAtLeast(0, peak); p >= 0; p = trees_[c].firstAtLeast(static_cast<size_t>(p), peak)) {
      const uint32_t at = static_cast<uint32_t>(p);
      while (next < byStart.size() && first_[members[byStart[next]]] <= at) started.push_back(byStart[next++]);
      started.erase(std::remove_if(started.begin(), started.end(), [&](uint32_t i) { return last_[members[i]] <= at; }), started.end());
      living.clear();
      for (uint32_t i : started) {
        if (class_[members[i]] == c) living.push_back(i);
      }
      // Of the tensors of c living at p that can go elsewhere, the one living longest clears most peaks.
      std::sort(living.begin(), living.end(), [&](uint32_t a, uint32_t b) {
        return last_[members[a]] != last_[members[b]] ? last_[members[a]] > last_[members[b]] : a < b;
      });
      uint32_t chosen = UINT32_MAX, target = 0;
      for (uint32_t i : living) {
        const long k = roomFor(members[i], c);
        if (k >= 0) {
          chosen = members[i];
          target = static_cast<uint32_t>(k);
          break;
        }
      }
      if (chosen == UINT32_MAX) {
        // No room anywhere: the smallest class that fits a tensor living here, one block larger (of those,
        // the tensor living longest).
        for (uint32_t i : living) {
          const uint32_t t = members[i];
          if (fit_[t] >= c) continue;
          if (chosen == UINT32_MAX || fit_[t] < target) {
            chosen = t;
            target = fit_[t];
          }
        }
        if (chosen == UINT32_MAX || added + sizes_[target] >= sizes_[c]) {
          for (auto m = moves.rbegin(); m != moves.rend(); ++m) apply(*m, true);
          return false;
        }
        added += sizes_[target];
      }
      moves.push_back({chosen, c, target});
      apply(moves.back(), false);
    }
    for (const Move& m : moves) {
      auto& from = members_[m.from];
      from.erase(std::find(from.begin(), from.end(), m.tensor));
      members_[m.to].push_back(m.tensor);
    }
    return true;
  }

  // The smallest class other than c, at least t's own size, that holds t throughout its lifetime without
  // raising its peak; or -1.
  long roomFor(uint32_t t, uint32_t c) {
    for (size_t k = fit_[t]; k < sizes_.size(); ++k) {
      if (k == c) continue;
      const int32_t peak = trees_[k].peak();
      if (peak > 0 && trees_[k].max(first_[t], last_[t]) < peak) return static_cast<long>(k);
    }
    return -1;
  }

  void apply(const Move& m, bool undo) {
    const uint32_t from = undo ? m.to : m.from, to = undo ? m.from : m.to;
    trees_[from].add(first_[m.tensor], last_[m.tensor], -1);
    trees_[to].add(first_[m.tensor], last_[m.tensor], 1);
    class_[m.tensor] = to;
  }

  const TrainInput& in_;
  std::vector<uint64_t> sizes_;   // the trained plan's classes, ascending
  size_t points_ = 0;
  std::vector<uint32_t> first_, last_;  // per tensor: compressed lifetime [first, last)
  std::vector<uint32_t> fit_;     // per tensor: the smallest class that holds it
  std::vector<uint32_t> class_;   // per tensor: its class now
  std::vector<CountTree> trees_;
  std::vector<std::vector<uint32_t>> members_;
};

}  // namespace

bool refineClasses(const TrainInput& input, TrainResult* result, const RefineLimits& limits) {
  if (input.count == 0 || result->plan.classes.empty()) return true;
  if (Refiner::treeBytesAtMost(input, *result) > limits.maxTreeBytes) return false;
  Refiner refiner(input, *result);
  refiner.run(limits.budgetNs);
  refiner.write(result);
  return true;
}

}  // namespace tp

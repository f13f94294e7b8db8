#include "train/train.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <queue>
#include <thread>

#include "os/os.h"
#include "train/refine.h"

namespace tp {

namespace {

constexpr double kForever = std::numeric_limits<double>::infinity();

// A min-tree over the classes: the earliest time at which each class has a block free (its heap top), so
// the first larger class with a block free at time t is found in O(log classes).
class MinTree {
 public:
  explicit MinTree(size_t n) {
    while (size_ < n) size_ <<= 1;
    node_.assign(2 * size_, kForever);
  }
  void set(size_t i, double value) {
    i += size_;
    node_[i] = value;
    for (i >>= 1; i > 0; i >>= 1) node_[i] = std::min(node_[2 * i], node_[2 * i + 1]);
  }
  // The first index >= from whose value is <= limit, or -1.
  long firstAtMost(size_t from, double limit) const { return find(1, 0, size_, from, limit); }

 private:
  long find(size_t node, size_t lo, size_t hi, size_t from, double limit) const {
    if (hi <= from || node_[node] > limit) return -1;
    if (hi - lo == 1) return static_cast<long>(lo);
    const size_t mid = (lo + hi) / 2;
    const long left = find(2 * node, lo, mid, from, limit);
    return left >= 0 ? left : find(2 * node + 1, mid, hi, from, limit);
  }
  size_t size_ = 1;
  std::vector<double> node_;
};

struct Slots {
  std::vector<uint64_t> size;       // distinct own-class sizes, ascending
  std::vector<uint32_t> ownSlot;    // per tensor
  std::vector<uint64_t> blocks;     // blocks created per slot
  std::vector<uint32_t> blockSlot;  // per block: its slot

  uint32_t newBlock(uint32_t slot) {
    blocks[slot]++;
    blockSlot.push_back(slot);
    return static_cast<uint32_t>(blockSlot.size() - 1);
  }
};

Slots ownClasses(const TrainInput& in) {
  Slots slots;
  std::vector<uint64_t> rounded(in.count);
  for (size_t t = 0; t < in.count; ++t) {
    const uint64_t size = static_cast<uint64_t>(in.sizes[t]);
    rounded[t] = (size + in.interval - 1) / in.interval * in.interval;
  }
  slots.size = rounded;
  std::sort(slots.size.begin(), slots.size.end());
  slots.size.erase(std::unique(slots.size.begin(), slots.size.end()), slots.size.end());
  slots.ownSlot.resize(in.count);
  for (size_t t = 0; t < in.count; ++t) {
    slots.ownSlot[t] = static_cast<uint32_t>(std::lower_bound(slots.size.begin(), slots.size.end(), rounded[t]) -
                                             slots.size.begin());
  }
  slots.blocks.assign(slots.size.size(), 0);
  return slots;
}

// Allocation-time order: a block is free for the tensor iff the last lifetime it holds ended by `start`.
uint64_t placeByAllocTime(const TrainInput& in, Slots& slots, std::vector<uint32_t>& blockOf) {
  std::vector<uint32_t> order(in.count);
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return in.starts[a] < in.starts[b]; });

  using Entry = std::pair<double, uint32_t>;  // (end of the block's last lifetime, block)
  std::vector<std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>>> heaps(slots.size.size());
  MinTree freeFrom(slots.size.size());
  uint64_t borrows = 0;

  for (uint32_t t : order) {
    const double start = in.starts[t], end = in.ends[t];
    size_t slot = slots.ownSlot[t];
    uint32_t block;
    if (!heaps[slot].empty() && heaps[slot].top().first <= start) {
      block = heaps[slot].top().second;
      heaps[slot].pop();
    } else if (long larger = freeFrom.firstAtMost(slot + 1, start); larger >= 0) {
      slot = static_cast<size_t>(larger);
      block = heaps[slot].top().second;
      heaps[slot].pop();
      ++borrows;
    } else {
      block = slots.newBlock(static_cast<uint32_t>(slot));
    }
    heaps[slot].push({end, block});
    freeFrom.set(slot, heaps[slot].top().first);
    blockOf[t] = block;
  }
  return borrows;
}

// A block's history in size order: the lifetimes it holds, ordered by start, disjoint.
struct History {
  std::map<double, double> lifetimes;
  double first = kForever, last = -kForever;  // span of the history, for a quick accept

  bool freeFor(double start, double end) const {
    if (end <= first || start >= last) return true;
    auto next = lifetimes.lower_bound(start);
    if (next != lifetimes.end() && next->first < end) return false;
    return next == lifetimes.begin() || std::prev(next)->second <= start;
  }
  void add(double start, double end) {
    lifetimes.emplace(start, end);
    first = std::min(first, start);
    last = std::max(last, end);
  }
};

uint64_t placeBySize(const TrainInput& in, Slots& slots, std::vector<uint32_t>& blockOf) {
  std::vector<uint32_t> order(in.count);
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return in.sizes[a] != in.sizes[b] ? in.sizes[a] > in.sizes[b] : in.starts[a] < in.starts[b];
  });

  std::vector<std::vector<uint32_t>> blocksOfSlot(slots.size.size());
  std::vector<History> history;
  uint64_t borrows = 0;
  constexpr uint32_t kNone = UINT32_MAX;

  for (uint32_t t : order) {
    const double start = in.starts[t], end = in.ends[t];
    const size_t own = slots.ownSlot[t];
    uint32_t block = kNone;
    for (size_t slot = own; slot < slots.size.size() && block == kNone; ++slot) {
      for (uint32_t candidate : blocksOfSlot[slot]) {
        if (history[candidate].freeFor(start, end)) {
          block = candidate;
          if (slot != own) ++borrows;
          break;
        }
      }
    }
    if (block == kNone) {
      block = slots.newBlock(static_cast<uint32_t>(own));
      history.emplace_back();
      blocksOfSlot[own].push_back(block);
    }
    history[block].add(start, end);
    blockOf[t] = block;
  }
  return borrows;
}

}  // namespace

TrainResult trainSizeClasses(const TrainInput& input) {
  TrainResult result;
  result.plan.interval = input.interval;
  result.blockOf.assign(input.count, 0);
  if (input.count == 0) return result;
  Slots slots = ownClasses(input);
  result.borrows = input.order == TrainOrder::AllocTime ? placeByAllocTime(input, slots, result.blockOf)
                                                        : placeBySize(input, slots, result.blockOf);
  // Slots that got no block are no class of the plan; number the others in ascending order.
  std::vector<uint32_t> classOfSlot(slots.size.size(), 0);
  for (size_t s = 0; s < slots.size.size(); ++s) {
    if (slots.blocks[s] == 0) continue;
    classOfSlot[s] = static_cast<uint32_t>(result.plan.classes.size());
    result.plan.classes.push_back({slots.size[s], slots.blocks[s]});
  }
  result.plan.schedule.resize(input.count);
  for (size_t t = 0; t < input.count; ++t) {
    result.plan.schedule[t] = {static_cast<uint64_t>(input.sizes[t]), classOfSlot[slots.blockSlot[result.blockOf[t]]]};
  }
  if (input.refine) {
    result.literal = result.plan.classes;
    result.refined = refineClasses(input, &result);
  }
  return result;
}


void trainEachInterval(const TrainInput& input, const std::vector<uint64_t>& intervals, unsigned threads,
                       std::vector<TrainResult>* results, std::vector<uint64_t>* elapsedNs) {
  results->assign(intervals.size(), TrainResult{});
  elapsedNs->assign(intervals.size(), 0);
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < intervals.size(); i = next++) {
      TrainInput one = input;
      one.interval = intervals[i];
      const uint64_t start = os::monotonicNs();
      (*results)[i] = trainSizeClasses(one);
      (*elapsedNs)[i] = os::monotonicNs() - start;
    }
  };
  const unsigned count = std::max(1u, std::min<unsigned>(threads, static_cast<unsigned>(intervals.size())));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < count; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
}

}  // namespace tp

#include "planner/place.h"

#include "os/os.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <queue>
#include <set>
#include <tuple>

namespace tp::planner {

namespace {

// Sorts [offset, end) pairs by offset: an LSD radix sort over the offset bytes in use (a few passes of
// 256 buckets) for long lists, which cost the greedy planners most of their time with std::sort.
void sortByOffset(std::vector<std::pair<uint64_t, uint64_t>>& v, std::vector<std::pair<uint64_t, uint64_t>>& scratch) {
  if (v.size() < 256) {
    std::sort(v.begin(), v.end());
    return;
  }
  constexpr unsigned kBits = 11;
  constexpr size_t kBuckets = size_t{1} << kBits;
  uint64_t max = 0;
  for (const auto& e : v) max |= e.first;
  scratch.resize(v.size());
  for (unsigned shift = 0; shift < 64 && (max >> shift) != 0; shift += kBits) {
    size_t count[kBuckets + 1] = {};
    for (const auto& e : v) count[((e.first >> shift) & (kBuckets - 1)) + 1]++;
    for (size_t i = 1; i <= kBuckets; ++i) count[i] += count[i - 1];
    for (const auto& e : v) scratch[count[(e.first >> shift) & (kBuckets - 1)]++] = e;
    v.swap(scratch);
  }
}

// Problems this large split each query between two threads (below, the hand-over costs more than it saves).
constexpr size_t kSplitAbove = 8192;

// A deadline kept by work done (buffers placed, conflicts visited), not by buffers placed: a buffer live
// throughout a trace of hundreds of thousands visits every one of them. The clock is read once per ~1 ms
// of work.
class WorkDeadline {
 public:
  explicit WorkDeadline(uint64_t deadlineNs) : deadlineNs_(deadlineNs) {}
  // Counts `steps` more of work; false once the deadline has passed.
  bool spend(uint64_t steps) {
    work_ += steps;
    if (work_ < checkAt_) return true;
    checkAt_ = work_ + kWorkBetweenChecks;
    return os::monotonicNs() <= deadlineNs_;
  }

 private:
  static constexpr uint64_t kWorkBetweenChecks = uint64_t{1} << 18;
  const uint64_t deadlineNs_;
  uint64_t work_ = 0, checkAt_ = kWorkBetweenChecks;
};

}  // namespace

HelperThread::HelperThread() : thread_([this] { loop(); }) {}

HelperThread::~HelperThread() {
  state_.store(3, std::memory_order_release);
  thread_.join();
}

void HelperThread::loop() {
  for (;;) {
    const int state = state_.load(std::memory_order_acquire);
    if (state == 3) return;
    int offered = 1;
    if (state == 1 && state_.compare_exchange_strong(offered, 4, std::memory_order_acquire)) {
      task_(context_);
      state_.store(2, std::memory_order_release);
    } else {
      std::this_thread::yield();
    }
  }
}

void HelperThread::start(void (*task)(void*), void* context) {
  task_ = task;
  context_ = context;
  state_.store(1, std::memory_order_release);
}

void HelperThread::wait() {
  int offered = 1;
  if (state_.compare_exchange_strong(offered, 0, std::memory_order_acq_rel)) {
    task_(context_);  // not taken: run it here
    return;
  }
  while (state_.load(std::memory_order_acquire) != 2) std::this_thread::yield();
  state_.store(0, std::memory_order_release);
}

namespace {
bool splitQueries(const Problem& p) {
  return !p.isGraph() && p.count() > kSplitAbove && std::thread::hardware_concurrency() > 1;
}
}  // namespace

Placer::Placer(const Problem& problem)
    : problem_(problem), index_(problem, 0, splitQueries(problem) ? 2 : 1) {
  if (splitQueries(problem)) {
    helperIndex_ = std::make_unique<ConflictIndex>(problem, 1, 2);
    helper_ = std::make_unique<HelperThread>();
  }
}

Placer::~Placer() = default;

uint64_t Placer::offsetFor(uint32_t b, Fit fit, const std::vector<uint64_t>& offsets) {
  busy_.clear();
  helperBusy_.clear();
  if (problem_.isGraph()) {
    for (uint32_t c : problem_.neighbours[b]) {
      if (offsets[c] != kUnplaced) busy_.emplace_back(offsets[c], offsets[c] + problem_.size[c]);
    }
  } else if (helper_) {
    // The index marks follow `offsets` (reset / put / take); each thread collects and sorts one half.
    helperQuery_ = b;
    helper_->start(
        [](void* self) {
          Placer& placer = *static_cast<Placer*>(self);
          placer.helperIndex_->collectPlacedBusy(placer.helperQuery_, placer.helperBusy_);
          sortByOffset(placer.helperBusy_, placer.helperScratch_);
        },
        this);
    index_.collectPlacedBusy(b, busy_);
  } else {
    index_.collectPlacedBusy(b, busy_);
  }
  sortByOffset(busy_, scratch_);
  if (helper_ && !problem_.isGraph()) helper_->wait();

  // Walk the busy ranges of both halves in offset order (a merge), tracking the gaps between them.
  const uint64_t size = problem_.size[b];
  uint64_t cursor = 0;
  uint64_t bestOffset = kUnplaced, bestGap = UINT64_MAX;
  size_t i = 0, j = 0;
  while (i < busy_.size() || j < helperBusy_.size()) {
    const bool takeMine = j == helperBusy_.size() || (i < busy_.size() && busy_[i].first <= helperBusy_[j].first);
    const auto [start, end] = takeMine ? busy_[i++] : helperBusy_[j++];
    if (start > cursor) {
      const uint64_t gap = start - cursor;
      if (gap >= size) {
        if (fit == Fit::First) return cursor;
        if (gap < bestGap) {
          bestGap = gap;
          bestOffset = cursor;
        }
      }
    }
    cursor = std::max(cursor, end);
  }
  return bestOffset != kUnplaced ? bestOffset : cursor;
}

void Placer::reset(const std::vector<uint64_t>& offsets) {
  for (uint32_t b = 0; b < problem_.count(); ++b) mark(b, offsets[b] != kUnplaced, offsets[b]);
}

uint64_t Placer::put(uint32_t b, Fit fit, std::vector<uint64_t>& offsets) {
  offsets[b] = offsetFor(b, fit, offsets);
  mark(b, true, offsets[b]);
  return offsets[b];
}

void Placer::take(uint32_t b, std::vector<uint64_t>& offsets) {
  offsets[b] = kUnplaced;
  mark(b, false, 0);
}

void Placer::mark(uint32_t b, bool placed, uint64_t offset) {
  index_.markPlaced(b, placed, offset);
  if (helperIndex_) helperIndex_->markPlaced(b, placed, offset);
}

std::vector<uint64_t> Placer::place(const std::vector<uint32_t>& order, Fit fit, uint64_t deadlineNs) {
  std::vector<uint64_t> offsets(problem_.count(), kUnplaced);
  reset(offsets);
  WorkDeadline deadline(deadlineNs);
  for (size_t i = 0; i < order.size(); ++i) {
    put(order[i], fit, offsets);
    if (!deadline.spend(1 + busy_.size() + helperBusy_.size())) return {};  // the busy ranges it met
  }
  return offsets;
}

std::vector<uint64_t> placeLowestFirst(const Problem& p, const std::vector<uint32_t>& rank, uint64_t deadlineNs) {
  const size_t n = p.count();
  const ConflictIndex index(p);
  std::vector<uint64_t> offsets(n, kUnplaced), lowest(n, 0);
  using Entry = std::tuple<uint64_t, uint32_t, uint32_t>;  // (offset, rank, buffer)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  for (uint32_t b = 0; b < n; ++b) heap.emplace(0, rank[b], b);
  WorkDeadline deadline(deadlineNs);
  while (!heap.empty()) {
    const auto [offset, r, b] = heap.top();
    heap.pop();
    if (offsets[b] != kUnplaced || offset != lowest[b]) continue;  // placed, or a stale entry
    offsets[b] = offset;
    const uint64_t top = offset + p.size[b];
    uint64_t visited = 0;
    index.forEachConflict(b, [&](uint32_t c) {
      ++visited;
      if (offsets[c] == kUnplaced && lowest[c] < top) {
        lowest[c] = top;
        heap.emplace(top, rank[c], c);
      }
    });
    if (!deadline.spend(1 + visited)) return {};
  }
  return offsets;
}

std::vector<uint64_t> placeOnline(const Problem& p) {
  if (p.isGraph()) return {};
  const size_t n = p.count();
  // Events by time; at one time, ends (false) before starts (half-open lifetimes: the memory of a buffer
  // that ends at t is free for one that starts at t).
  std::vector<std::tuple<uint64_t, bool, uint32_t>> events;  // (time, starts, buffer)
  events.reserve(2 * n);
  for (uint32_t b = 0; b < n; ++b) {
    events.emplace_back(p.lower[b], true, b);
    events.emplace_back(p.upper[b], false, b);
  }
  std::sort(events.begin(), events.end());
  std::map<uint64_t, uint64_t> freeByStart;            // [start, end): disjoint, never adjacent, below the top
  std::set<std::pair<uint64_t, uint64_t>> freeBySize;  // (length, start) of the same ranges
  uint64_t top = 0;                                    // everything from here up is free
  const auto removeRange = [&](std::map<uint64_t, uint64_t>::iterator it) {
    freeBySize.erase({it->second - it->first, it->first});
    return freeByStart.erase(it);
  };
  const auto addRange = [&](uint64_t start, uint64_t end) {
    if (end == top) {
      top = start;
      return;
    }
    freeByStart.emplace(start, end);
    freeBySize.emplace(end - start, start);
  };
  std::vector<uint64_t> offsets(n, kUnplaced);
  for (const auto& [time, starts, b] : events) {
    const uint64_t size = p.size[b];
    if (starts) {
      const auto fit = freeBySize.lower_bound({size, 0});
      if (fit != freeBySize.end()) {
        const auto [length, start] = *fit;
        removeRange(freeByStart.find(start));
        offsets[b] = start;
        if (length > size) addRange(start + size, start + length);
        continue;
      }
      offsets[b] = top;  // none holds it (and none reaches the top: addRange lowers the top instead)
      top += size;
      continue;
    }
    uint64_t start = offsets[b], end = start + size;
    auto next = freeByStart.lower_bound(start);
    if (next != freeByStart.end() && next->first == end) {
      end = next->second;
      next = removeRange(next);
    }
    if (next != freeByStart.begin() && std::prev(next)->second == start) {
      start = std::prev(next)->first;
      removeRange(std::prev(next));
    }
    addRange(start, end);
  }
  return offsets;
}

std::vector<uint32_t> orderBy(const Problem& p, const std::vector<double>& key) {
  std::vector<uint32_t> order(p.count());
  std::iota(order.begin(), order.end(), 0u);
  const bool graph = p.isGraph();
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    if (key[a] != key[b]) return key[a] > key[b];
    if (graph) return false;
    const uint64_t la = p.upper[a] - p.lower[a], lb = p.upper[b] - p.lower[b];
    if (la != lb) return la > lb;
    return p.lower[a] < p.lower[b];
  });
  return order;
}

std::vector<uint32_t> sizeOrder(const Problem& p) {
  std::vector<double> key(p.size.begin(), p.size.end());
  return orderBy(p, key);
}

}  // namespace tp::planner

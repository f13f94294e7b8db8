#include "planner/strip.h"

#include <algorithm>
#include <numeric>
#include <unordered_set>

#include "os/os.h"
#include "planner/place.h"

namespace tp::planner {

namespace {

constexpr int kMaxAdjustments = 20;  // S2 step 6: a preset count of reorderings

// Per-buffer measures S2 sorts by (step 2).
struct Measures {
  std::vector<double> size, lifetime, overlap;
};

Measures measure(const Problem& p) {
  Measures m;
  const size_t n = p.count();
  m.size.resize(n);
  m.lifetime.resize(n);
  m.overlap.assign(n, 0);
  const ConflictIndex index(p);
  for (uint32_t b = 0; b < n; ++b) {
    m.size[b] = static_cast<double>(p.size[b]);
    m.lifetime[b] = p.width(b);
    // Total time-overlap with the others (graphs: the sizes of the conflicting buffers).
    index.forEachConflict(b, [&](uint32_t c) {
      m.overlap[b] += p.isGraph() ? static_cast<double>(p.size[c])
                                  : static_cast<double>(std::min(p.upper[b], p.upper[c]) - std::max(p.lower[b], p.lower[c]));
    });
  }
  return m;
}

// The metric orders S2 names: single measures and their combinations (sum of normalised values, product,
// ratio, lexicographic).
std::vector<std::vector<uint32_t>> metricOrders(const Problem& p, const Measures& m) {
  const size_t n = p.count();
  const double maxSize = *std::max_element(m.size.begin(), m.size.end());
  const double maxLife = std::max(1.0, *std::max_element(m.lifetime.begin(), m.lifetime.end()));
  std::vector<std::vector<double>> keys(6, std::vector<double>(n));
  for (size_t b = 0; b < n; ++b) {
    keys[0][b] = m.size[b];
    keys[1][b] = m.lifetime[b];
    keys[2][b] = m.overlap[b];
    keys[3][b] = m.size[b] / maxSize + m.lifetime[b] / maxLife;
    keys[4][b] = m.size[b] * m.lifetime[b];
    keys[5][b] = m.size[b] / std::max(1.0, m.lifetime[b]);
  }
  std::vector<std::vector<uint32_t>> orders;
  for (const auto& key : keys) orders.push_back(orderBy(p, key));
  // Lexicographic: lifetime first, then size.
  std::vector<uint32_t> lex(n);
  std::iota(lex.begin(), lex.end(), 0u);
  std::stable_sort(lex.begin(), lex.end(), [&](uint32_t a, uint32_t b) {
    return m.lifetime[a] != m.lifetime[b] ? m.lifetime[a] > m.lifetime[b] : m.size[a] > m.size[b];
  });
  orders.push_back(std::move(lex));
  return orders;
}

uint64_t hashOrder(const std::vector<uint32_t>& order) {
  uint64_t h = 1469598103934665603ull;
  for (uint32_t b : order) h = (h ^ b) * 1099511628211ull;
  return h;
}

enum Risk : uint8_t { kNone = 0, kLow = 1, kMedium = 2, kHigh = 3 };

class PeakSuppression {
 public:
  PeakSuppression(const Problem& p, const Measures& m, uint64_t threshold)
      : p_(p), m_(m), threshold_(threshold), placer_(p), index_(p) {}

  // One round of step 5: risk classes, groups, each group's order tuned in turn on top of the groups
  // before it, then high, medium, low and no-risk rectangles merged in that order. Returns the new order;
  // `offsets` receives its layout. Returns an empty order when the deadline passes first.
  std::vector<uint32_t> round(const std::vector<uint32_t>& order, const std::vector<uint64_t>& layout,
                              std::vector<uint64_t>& offsets, uint64_t deadline) {
    const size_t n = p_.count();
    std::vector<uint8_t> risk(n, kNone);
    for (uint32_t b = 0; b < n; ++b) {
      const uint64_t top = layout[b] + p_.size[b];
      if (top > threshold_) risk[b] = kHigh;
      else if (top == threshold_) risk[b] = kMedium;
    }
    spread(risk, kHigh, kHigh);      // and those overlapping them in time
    spread(risk, kMedium, kMedium);
    spread(risk, kHigh, kLow);       // overlapping high or medium ones
    spread(risk, kMedium, kLow);

    std::vector<uint32_t> position(n);
    for (uint32_t i = 0; i < n; ++i) position[order[i]] = i;
    offsets.assign(n, kUnplaced);
    placer_.reset(offsets);
    std::vector<uint32_t> next;
    for (Risk level : {kHigh, kMedium}) {
      for (std::vector<uint32_t>& group : groups(risk, level, position)) {
        if (os::monotonicNs() > deadline) return {};
        const std::vector<uint32_t> chosen = tune(group, offsets);
        for (uint32_t b : chosen) placer_.put(b, Fit::First, offsets);
        next.insert(next.end(), chosen.begin(), chosen.end());
      }
    }
    for (Risk level : {kLow, kNone}) {
      for (uint32_t b : order) {
        if (risk[b] != level) continue;
        if ((next.size() & 1023) == 1023 && os::monotonicNs() > deadline) return {};
        placer_.put(b, Fit::First, offsets);
        next.push_back(b);
      }
    }
    return next;
  }

 private:
  // Marks every rectangle overlapping one of class `from` as `to`, unless it is already classed higher.
  void spread(std::vector<uint8_t>& risk, Risk from, Risk to) {
    const std::vector<uint8_t> before = risk;
    for (uint32_t b = 0; b < p_.count(); ++b) {
      if (before[b] != from) continue;
      index_.forEachConflict(b, [&](uint32_t c) {
        if (risk[c] < to) risk[c] = to;
      });
    }
  }

  // The rectangles of one class split by time-overlap (connected components), each in the current order,
  // groups ordered by their first member.
  std::vector<std::vector<uint32_t>> groups(const std::vector<uint8_t>& risk, Risk level, const std::vector<uint32_t>& position) {
    const size_t n = p_.count();
    std::vector<uint32_t> parent(n);
    std::iota(parent.begin(), parent.end(), 0u);
    auto find = [&](uint32_t x) {
      while (parent[x] != x) x = parent[x] = parent[parent[x]];
      return x;
    };
    for (uint32_t b = 0; b < n; ++b) {
      if (risk[b] != level) continue;
      index_.forEachConflict(b, [&](uint32_t c) {
        if (risk[c] == level) parent[find(b)] = find(c);
      });
    }
    std::vector<std::vector<uint32_t>> byRoot(n);
    std::vector<uint32_t> members;
    for (uint32_t b = 0; b < n; ++b) if (risk[b] == level) members.push_back(b);
    std::sort(members.begin(), members.end(), [&](uint32_t a, uint32_t b) { return position[a] < position[b]; });
    std::vector<std::vector<uint32_t>> out;
    std::vector<int64_t> slot(n, -1);
    for (uint32_t b : members) {
      const uint32_t root = find(b);
      if (slot[root] < 0) {
        slot[root] = static_cast<int64_t>(out.size());
        out.emplace_back();
      }
      out[static_cast<size_t>(slot[root])].push_back(b);
    }
    return out;
  }

  // Tries the group in its current order, reversed, and sorted by each measure, each on top of what is
  // placed so far; keeps the order whose rectangles end lowest.
  std::vector<uint32_t> tune(const std::vector<uint32_t>& group, std::vector<uint64_t>& offsets) {
    std::vector<std::vector<uint32_t>> candidates{group, {group.rbegin(), group.rend()}};
    for (const std::vector<double>* key : {&m_.size, &m_.lifetime, &m_.overlap}) {
      std::vector<uint32_t> sorted = group;
      std::stable_sort(sorted.begin(), sorted.end(), [&](uint32_t a, uint32_t b) { return (*key)[a] > (*key)[b]; });
      candidates.push_back(std::move(sorted));
    }
    size_t bestIndex = 0;
    uint64_t bestTop = UINT64_MAX;
    for (size_t i = 0; i < candidates.size(); ++i) {
      uint64_t top = 0;
      for (uint32_t b : candidates[i]) top = std::max(top, placer_.put(b, Fit::First, offsets) + p_.size[b]);
      for (uint32_t b : candidates[i]) placer_.take(b, offsets);
      if (top < bestTop) {
        bestTop = top;
        bestIndex = i;
      }
    }
    return candidates[bestIndex];
  }

  const Problem& p_;
  const Measures& m_;
  uint64_t threshold_;
  Placer placer_;
  ConflictIndex index_;
};

}  // namespace

PlanResult stripPacking(const Problem& p, uint64_t timeLimitMs, uint64_t startNs) {
  PlanResult result;
  const uint64_t deadline = startNs + timeLimitMs * 1000000ull;
  const uint64_t threshold = lowerBound(p).value;  // step 4: the theoretical threshold
  Placer placer(p);
  result.offsets = placer.place(sizeOrder(p), Fit::Best);
  uint64_t bestPeak = heightOf(p, result.offsets);
  std::string how = "greedy by size (the reference)";
  if (p.count() == 0 || bestPeak <= threshold || os::monotonicNs() > deadline) {
    result.notes = how + (bestPeak <= threshold ? "" : "; no time left to reorder");
    return result;
  }

  // Steps 2-3: every metric order, bottom-aligned; the lowest layout is where tuning starts.
  const Measures m = measure(p);
  if (os::monotonicNs() > deadline) {
    result.notes = how + "; no time left to reorder";
    return result;
  }
  std::vector<uint32_t> order;
  std::vector<uint64_t> layout;
  uint64_t layoutPeak = UINT64_MAX;
  int metric = 0, bestMetric = 0;
  for (std::vector<uint32_t>& candidate : metricOrders(p, m)) {
    std::vector<uint64_t> offsets = placer.place(candidate, Fit::First, deadline);
    if (offsets.empty()) break;
    const uint64_t peak = heightOf(p, offsets);
    if (peak < layoutPeak) {
      layoutPeak = peak;
      layout = std::move(offsets);
      order = std::move(candidate);
      bestMetric = metric;
    }
    ++metric;
  }
  if (order.empty()) {
    result.notes = how + "; no time left to reorder";
    return result;
  }
  if (layoutPeak < bestPeak) {
    bestPeak = layoutPeak;
    result.offsets = layout;
    how = "metric order " + std::to_string(bestMetric);
  }

  // Steps 4-6: reorder and place again until the threshold is reached, an order repeats, or the count.
  PeakSuppression suppression(p, m, threshold);
  std::unordered_set<uint64_t> seen{hashOrder(order)};
  int adjustments = 0;
  std::string stop = "adjustment limit";
  for (; adjustments < kMaxAdjustments; ++adjustments) {
    if (layoutPeak <= threshold) {
      stop = "threshold reached";
      break;
    }
    if (os::monotonicNs() > deadline) {
      stop = "time limit";
      break;
    }
    std::vector<uint64_t> offsets;
    std::vector<uint32_t> next = suppression.round(order, layout, offsets, deadline);
    if (next.empty()) {
      stop = "time limit";
      break;
    }
    order = std::move(next);
    layout = std::move(offsets);
    layoutPeak = heightOf(p, layout);
    if (layoutPeak < bestPeak) {
      bestPeak = layoutPeak;
      result.offsets = layout;
      how = "peak suppression round " + std::to_string(adjustments + 1);
    }
    if (!seen.insert(hashOrder(order)).second) {
      stop = "order repeated";
      ++adjustments;
      break;
    }
  }
  result.notes = "best: " + how + "; " + std::to_string(adjustments) + " reorderings, stopped: " + stop;
  return result;
}

}  // namespace tp::planner

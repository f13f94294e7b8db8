#include "planner/problem.h"

#include <algorithm>
#include <numeric>
#include <set>
#include <tuple>

namespace tp::planner {

bool Problem::conflict(uint32_t a, uint32_t b) const {
  if (isGraph()) return std::binary_search(neighbours[a].begin(), neighbours[a].end(), b);
  return lower[a] < upper[b] && lower[b] < upper[a];
}

bool validate(const Problem& p, std::string* error) {
  const size_t n = p.count();
  const bool graph = !p.neighbours.empty();
  if (!graph && (p.lower.size() != n || p.upper.size() != n)) {
    *error = "sizes and lifetimes differ in length";
    return false;
  }
  if (graph && p.neighbours.size() != n) {
    *error = "sizes and the conflict graph differ in length";
    return false;
  }
  for (size_t b = 0; b < n; ++b) {
    if (p.size[b] == 0 || p.size[b] > (uint64_t{1} << 62)) {
      *error = "buffer " + std::to_string(b) + ": size must be between 1 and 2^62";
      return false;
    }
    if (!graph && p.lower[b] >= p.upper[b]) {
      *error = "buffer " + std::to_string(b) + ": lifetime [" + std::to_string(p.lower[b]) + ", " +
               std::to_string(p.upper[b]) + ") is empty or inverted";
      return false;
    }
    if (graph) {
      const auto& list = p.neighbours[b];
      for (size_t k = 0; k < list.size(); ++k) {
        const uint32_t c = list[k];
        if (c >= n || c == b || (k > 0 && list[k - 1] >= c)) {
          *error = "buffer " + std::to_string(b) + ": conflict list must hold sorted, distinct, other buffers";
          return false;
        }
        if (!std::binary_search(p.neighbours[c].begin(), p.neighbours[c].end(), static_cast<uint32_t>(b))) {
          *error = "conflict " + std::to_string(b) + "-" + std::to_string(c) + " is not symmetric";
          return false;
        }
      }
    }
  }
  return true;
}

Sections buildSections(const Problem& p) {
  Sections s;
  s.times.reserve(2 * p.count());
  s.times.insert(s.times.end(), p.lower.begin(), p.lower.end());
  s.times.insert(s.times.end(), p.upper.begin(), p.upper.end());
  std::sort(s.times.begin(), s.times.end());
  s.times.erase(std::unique(s.times.begin(), s.times.end()), s.times.end());
  s.first.resize(p.count());
  s.last.resize(p.count());
  for (size_t b = 0; b < p.count(); ++b) {
    s.first[b] = static_cast<uint32_t>(std::lower_bound(s.times.begin(), s.times.end(), p.lower[b]) - s.times.begin());
    s.last[b] = static_cast<uint32_t>(std::lower_bound(s.times.begin(), s.times.end(), p.upper[b]) - s.times.begin()) - 1;
  }
  return s;
}

std::vector<uint64_t> sectionLoads(const Problem& p, const Sections& s) {
  // A difference array over the sections, summed up; it may wrap below zero on the way, which unsigned
  // arithmetic makes harmless (the running sums are exact).
  std::vector<uint64_t> delta(s.count() + 1, 0);
  for (size_t b = 0; b < p.count(); ++b) {
    delta[s.first[b]] += p.size[b];
    delta[s.last[b] + 1] -= p.size[b];
  }
  std::vector<uint64_t> loads(s.count());
  uint64_t running = 0;
  for (size_t k = 0; k < s.count(); ++k) loads[k] = running += delta[k];
  return loads;
}

ConflictIndex::ConflictIndex(const Problem& problem) : ConflictIndex(problem, 0, 1) {}

ConflictIndex::ConflictIndex(const Problem& problem, unsigned part, unsigned parts)
    : problem_(problem), graph_(problem.isGraph()) {
  if (graph_) return;
  std::vector<uint32_t> all(problem.count());
  std::iota(all.begin(), all.end(), 0u);
  std::sort(all.begin(), all.end(), [&](uint32_t a, uint32_t b) { return problem.lower[a] < problem.lower[b]; });
  for (size_t rank = part; rank < all.size(); rank += parts) order_.push_back(all[rank]);
  count_ = order_.size();
  while (leaves_ < count_) leaves_ <<= 1;
  maxUpper_.assign(2 * leaves_, 0);
  leafOf_.assign(problem.count(), UINT32_MAX);
  sortedLower_.resize(count_);
  for (size_t i = 0; i < count_; ++i) {
    maxUpper_[leaves_ + i] = problem.upper[order_[i]];
    sortedLower_[i] = problem.lower[order_[i]];
    leafOf_[order_[i]] = static_cast<uint32_t>(i);
  }
  for (size_t node = leaves_ - 1; node > 0; --node) maxUpper_[node] = std::max(maxUpper_[2 * node], maxUpper_[2 * node + 1]);
  placed_.assign(2 * leaves_, 0);
  leafBusy_.assign(count_, {0, 0});
}

void ConflictIndex::markPlaced(uint32_t b, bool placed, uint64_t offset) {
  if (graph_ || leafOf_[b] == UINT32_MAX) return;
  const size_t leaf = leafOf_[b];
  if (placed) leafBusy_[leaf] = {offset, offset + problem_.size[b]};
  size_t node = leaves_ + leaf;
  if ((placed_[node] != 0) == placed) return;
  for (; node > 0; node >>= 1) placed_[node] += placed ? 1 : static_cast<uint32_t>(-1);
}

void ConflictIndex::collectPlacedBusy(uint32_t b, std::vector<std::pair<uint64_t, uint64_t>>& out) const {
  collect(1, 0, leaves_, problem_.lower[b], problem_.upper[b], leafOf_[b], out);
}

void ConflictIndex::collect(size_t node, size_t lo, size_t hi, uint64_t from, uint64_t to, uint32_t self,
                            std::vector<std::pair<uint64_t, uint64_t>>& out) const {
  if (lo >= count_ || placed_[node] == 0 || maxUpper_[node] <= from || sortedLower_[lo] >= to) return;
  if (hi - lo == 1) {
    if (lo != self) out.push_back(leafBusy_[lo]);
    return;
  }
  const size_t mid = (lo + hi) / 2;
  collect(2 * node, lo, mid, from, to, self, out);
  collect(2 * node + 1, mid, hi, from, to, self, out);
}

namespace {

// Heaviest clique by branch and bound: candidates in descending weight, pruned by the weight still available.
class CliqueSearch {
 public:
  CliqueSearch(const Problem& p, uint64_t nodeBudget) : p_(p), budget_(nodeBudget) {}

  LowerBound run() {
    std::vector<uint32_t> all(p_.count());
    std::iota(all.begin(), all.end(), 0u);
    std::sort(all.begin(), all.end(), [&](uint32_t a, uint32_t b) { return p_.size[a] > p_.size[b]; });
    expand(all, 0);
    return {best_, nodes_ <= budget_};
  }

 private:
  void expand(const std::vector<uint32_t>& candidates, uint64_t weight) {
    if (weight > best_) best_ = weight;
    uint64_t available = 0;
    for (uint32_t c : candidates) available += p_.size[c];
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (weight + available <= best_ || ++nodes_ > budget_) return;
      const uint32_t v = candidates[i];
      available -= p_.size[v];
      std::vector<uint32_t> next;
      for (size_t j = i + 1; j < candidates.size(); ++j) {
        if (p_.conflict(v, candidates[j])) next.push_back(candidates[j]);
      }
      expand(next, weight + p_.size[v]);
    }
  }

  const Problem& p_;
  uint64_t budget_;
  uint64_t nodes_ = 0;
  uint64_t best_ = 0;
};

}  // namespace

LowerBound lowerBound(const Problem& p) {
  if (p.count() == 0) return {};
  if (p.isGraph()) return CliqueSearch(p, 2'000'000).run();
  const std::vector<uint64_t> loads = sectionLoads(p, buildSections(p));
  return {*std::max_element(loads.begin(), loads.end()), true};
}

uint64_t heightOf(const Problem& p, const std::vector<uint64_t>& offsets) {
  uint64_t height = 0;
  for (size_t b = 0; b < p.count(); ++b) height = std::max(height, offsets[b] + p.size[b]);
  return height;
}

static std::string overlapMessage(size_t a, size_t b, const Problem& p, const std::vector<uint64_t>& off) {
  return "buffers " + std::to_string(a) + " [" + std::to_string(off[a]) + ", " + std::to_string(off[a] + p.size[a]) +
         ") and " + std::to_string(b) + " [" + std::to_string(off[b]) + ", " + std::to_string(off[b] + p.size[b]) +
         ") conflict and overlap";
}

bool verify(const Problem& p, const std::vector<uint64_t>& offsets, std::string* why) {
  const size_t n = p.count();
  if (offsets.size() != n) {
    *why = "expected " + std::to_string(n) + " offsets, got " + std::to_string(offsets.size());
    return false;
  }
  for (size_t b = 0; b < n; ++b) {
    if (offsets[b] > (uint64_t{1} << 62)) {
      *why = "buffer " + std::to_string(b) + ": offset out of range";
      return false;
    }
  }
  if (p.isGraph()) {
    for (size_t b = 0; b < n; ++b) {
      for (uint32_t c : p.neighbours[b]) {
        if (c > b && offsets[b] < offsets[c] + p.size[c] && offsets[c] < offsets[b] + p.size[b]) {
          *why = overlapMessage(b, c, p, offsets);
          return false;
        }
      }
    }
    return true;
  }
  // Sweep the time axis; at a time point, ends come before starts (lifetimes are half-open).
  std::vector<std::tuple<uint64_t, int, uint32_t>> events;
  events.reserve(2 * n);
  for (uint32_t b = 0; b < n; ++b) {
    events.emplace_back(p.lower[b], 1, b);
    events.emplace_back(p.upper[b], 0, b);
  }
  std::sort(events.begin(), events.end());
  std::set<std::pair<uint64_t, uint32_t>> live;  // (offset, buffer): disjoint address ranges, by offset
  for (const auto& [time, start, b] : events) {
    if (!start) {
      live.erase({offsets[b], b});
      continue;
    }
    auto next = live.lower_bound({offsets[b], 0});
    if (next != live.end() && next->first < offsets[b] + p.size[b]) {
      *why = overlapMessage(b, next->second, p, offsets);
      return false;
    }
    if (next != live.begin()) {
      const auto before = std::prev(next);
      if (before->first + p.size[before->second] > offsets[b]) {
        *why = overlapMessage(before->second, b, p, offsets);
        return false;
      }
    }
    live.insert({offsets[b], b});
  }
  return true;
}

}  // namespace tp::planner

#include "planner/search.h"

#include <algorithm>
#include <numeric>

#include "os/os.h"
#include "planner/place.h"

namespace tp::planner {

namespace {

enum class Status : uint8_t { Found, NotFound, Aborted };

// A static preordering: keys compared in turn, larger first. W: lifetime width (graphs: conflicts),
// A: area (size x width), T: the heaviest total of the sections the buffer spans (graphs: size).
using Heuristic = const char*;
constexpr Heuristic kHeuristics[] = {"WAT", "TAW", "TWA"};

class Search {
 public:
  Search(const Problem& p, uint64_t capacity, const SearchLimits& limits)
      : p_(p), n_(p.count()), graph_(p.isGraph()), capacity_(capacity), limits_(limits) {
    const ConflictIndex index(p);
    conflicts_.resize(n_);
    for (uint32_t b = 0; b < n_; ++b) index.forEachConflict(b, [&](uint32_t c) { conflicts_[b].push_back(c); });
    if (!graph_) {
      sections_ = buildSections(p);
      const size_t s = sections_.count();
      members_.resize(s);
      floor_.assign(s, 0);
      total_ = sectionLoads(p, sections_);
      cuts_.assign(s, 0);
      sectionStamp_.assign(s, 0);
      for (uint32_t b = 0; b < n_; ++b) {
        for (uint32_t k = sections_.first[b]; k <= sections_.last[b]; ++k) {
          members_[k].push_back(b);
          if (k < sections_.last[b]) cuts_[k]++;  // b spans the boundary between k and k + 1
        }
      }
    }
    minOffset_.assign(n_, 0);
    offset_.assign(n_, kUnplaced);
    solution_.assign(n_, kUnplaced);
    rank_.assign(n_, 0);
  }

  SearchOutcome run(const std::vector<double>* hint, std::vector<uint64_t>* offsets, SearchStats* stats) {
    std::vector<Part> parts = initialParts();
    Status status = Status::Aborted;
    if (hint) {
      status = solveAll(parts, nullptr, hint, UINT64_MAX);
    } else {
      // Round robin over the preorderings with a node limit that doubles every round: a heuristic that
      // suits the instance finishes early; none is stuck in a hopeless subtree for long.
      for (uint64_t limit = 2 * std::max<size_t>(n_, 1); status == Status::Aborted && !outOfTime(); limit *= 2) {
        for (Heuristic h : kHeuristics) {
          status = solveAll(parts, h, nullptr, limit);
          if (status != Status::Aborted || outOfTime()) break;
        }
      }
    }
    if (stats) stats->nodes = nodes_;
    if (status == Status::Found) {
      *offsets = solution_;
      return SearchOutcome::Found;
    }
    return status == Status::NotFound ? SearchOutcome::Infeasible : SearchOutcome::Aborted;
  }

 private:
  struct Part {
    std::vector<uint32_t> buffers;
    uint32_t firstSection = 0, endSection = 0;  // [first, end) (interval problems)
  };
  struct Candidate {
    uint64_t offset;
    uint32_t rank;
    uint32_t buffer;
    bool operator<(const Candidate& o) const { return offset != o.offset ? offset < o.offset : rank < o.rank; }
  };

  bool outOfTime() { return os::monotonicNs() > limits_.deadlineNs || nodes_ > limits_.nodeBudget; }

  std::vector<Part> initialParts() {
    std::vector<Part> parts;
    for (std::vector<uint32_t>& buffers : partitions(p_)) {
      Part part{std::move(buffers), 0, 0};
      if (!graph_) {
        part.firstSection = UINT32_MAX;
        for (uint32_t b : part.buffers) {
          part.firstSection = std::min(part.firstSection, sections_.first[b]);
          part.endSection = std::max(part.endSection, sections_.last[b] + 1);
        }
      }
      parts.push_back(std::move(part));
    }
    return parts;
  }

  Status solveAll(const std::vector<Part>& parts, Heuristic h, const std::vector<double>* hint, uint64_t limit) {
    nodesLeft_ = limit;
    heuristic_ = h;
    hint_ = hint;
    for (const Part& part : parts) {
      const Status s = solvePart(part, h, hint);
      if (s != Status::Found) return s;
    }
    return Status::Found;
  }

  // Ranks a part's buffers by the preordering, then searches it from an empty canonical prefix.
  Status solvePart(const Part& part, Heuristic h, const std::vector<double>* hint) {
    std::vector<uint32_t> order = part.buffers;
    auto key = [&](char c, uint32_t b) -> double {
      switch (c) {
        case 'W': return p_.width(b);
        case 'A': return p_.width(b) * static_cast<double>(p_.size[b]);
        default: {
          if (graph_) return static_cast<double>(p_.size[b]);
          uint64_t heaviest = 0;
          for (uint32_t k = sections_.first[b]; k <= sections_.last[b]; ++k) heaviest = std::max(heaviest, total_[k]);
          return static_cast<double>(heaviest);
        }
      }
    };
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
      if (hint) return (*hint)[a] > (*hint)[b];
      for (const char* c = h; *c; ++c) {
        const double ka = key(*c, a), kb = key(*c, b);
        if (ka != kb) return ka > kb;
      }
      return false;
    });
    std::vector<Candidate> ordering;
    ordering.reserve(order.size());
    for (uint32_t r = 0; r < order.size(); ++r) {
      rank_[order[r]] = r;
      ordering.push_back({minOffset_[order[r]], r, order[r]});
    }
    return dfs(part, ordering, 0, 0);
  }

  Status dfs(const Part& part, const std::vector<Candidate>& parentOrdering, uint64_t lastOffset, uint32_t lastRank) {
    if (nodesLeft_ == 0) return Status::Aborted;
    --nodesLeft_;
    if ((++nodes_ & 255) == 0 && outOfTime()) return Status::Aborted;

    // The unplaced buffers, by the offset each would take now, then by rank.
    std::vector<Candidate> ordering;
    ordering.reserve(parentOrdering.size());
    for (const Candidate& c : parentOrdering) {
      if (offset_[c.buffer] == kUnplaced) ordering.push_back({minOffset_[c.buffer], c.rank, c.buffer});
    }
    if (ordering.empty()) {
      for (uint32_t b : part.buffers) solution_[b] = offset_[b];
      return Status::Found;
    }
    std::sort(ordering.begin(), ordering.end());
    uint64_t minHeight = UINT64_MAX;
    for (const Candidate& c : ordering) minHeight = std::min(minHeight, c.offset + p_.size[c.buffer]);

    for (const Candidate& c : ordering) {
      // Canonical layouts only: placements come in non-decreasing (offset, rank) order.
      if (c.offset < lastOffset || (c.offset == lastOffset && c.rank < lastRank)) continue;
      // Dominance: at or above another unplaced buffer's top, this would leave a gap that buffer fits.
      if (c.offset >= minHeight) continue;
      if (c.offset + p_.size[c.buffer] > capacity_) continue;
      const size_t offsetMark = offsetUndo_.size(), floorMark = floorUndo_.size();
      place(c.buffer, c.offset);
      Status status = Status::NotFound;
      if (consistent(part, c.offset)) status = graph_ ? dfs(part, ordering, c.offset, c.rank) : decompose(part, ordering, c);
      unplace(c.buffer, offsetMark, floorMark);
      if (status != Status::NotFound) return status;
    }
    return Status::NotFound;
  }

  // After placing c's buffer: where no unplaced buffer spans a section boundary any more, the rest falls
  // apart into independent parts, each searched on its own.
  Status decompose(const Part& part, const std::vector<Candidate>& ordering, const Candidate& c) {
    const uint32_t b = c.buffer;
    solution_[b] = offset_[b];  // recorded now: a sub-part's leaf records only its own buffers
    std::vector<uint32_t> cutpoints{part.firstSection};
    for (uint32_t k = sections_.first[b]; k < sections_.last[b]; ++k) {
      if (--cuts_[k] == 0 && k + 1 > part.firstSection && k + 1 < part.endSection) cutpoints.push_back(k + 1);
    }
    Status status = Status::Found;
    if (cutpoints.size() == 1) {
      status = dfs(part, ordering, c.offset, c.rank);
    } else {
      cutpoints.push_back(part.endSection);
      std::sort(cutpoints.begin(), cutpoints.end());
      for (size_t i = 1; i < cutpoints.size() && status == Status::Found; ++i) {
        Part sub{{}, cutpoints[i - 1], cutpoints[i]};
        for (uint32_t other : part.buffers) {
          if (offset_[other] == kUnplaced && sections_.first[other] < sub.endSection && sections_.last[other] >= sub.firstSection) {
            sub.buffers.push_back(other);
          }
        }
        if (sub.buffers.empty()) continue;
        // A sub-part is ranked afresh; ranks of its buffers are restored afterwards for this level.
        std::vector<uint32_t> savedRanks;
        for (uint32_t other : sub.buffers) savedRanks.push_back(rank_[other]);
        status = solvePart(sub, heuristic_, hint_);
        for (size_t k = 0; k < sub.buffers.size(); ++k) rank_[sub.buffers[k]] = savedRanks[k];
      }
    }
    for (uint32_t k = sections_.first[b]; k < sections_.last[b]; ++k) cuts_[k]++;
    return status;
  }

  // Every section still has room for what remains in it, stacked above its floor (and above the offset
  // just used: everything placed from now on lands at or above it).
  bool consistent(const Part& part, uint64_t offset) const {
    for (uint32_t k = part.firstSection; k < part.endSection; ++k) {
      if (total_[k] != 0 && std::max(floor_[k], offset) + total_[k] > capacity_) return false;
    }
    return true;
  }

  void place(uint32_t b, uint64_t offset) {
    const uint64_t top = offset + p_.size[b];
    offset_[b] = offset;
    touched_.clear();
    for (uint32_t c : conflicts_[b]) {
      if (offset_[c] != kUnplaced || minOffset_[c] >= top) continue;
      offsetUndo_.emplace_back(c, minOffset_[c]);
      minOffset_[c] = top;
      touched_.push_back(c);
    }
    if (graph_) return;
    for (uint32_t k = sections_.first[b]; k <= sections_.last[b]; ++k) {
      floorUndo_.emplace_back(k, floor_[k]);
      floor_[k] = top;
      total_[k] -= p_.size[b];
    }
    // A section's floor is at least the lowest offset any of its unplaced buffers can still take. Only
    // sections of buffers whose lowest offset rose can change; each is visited once (stamped).
    if (++stamp_ == 0) {
      std::fill(sectionStamp_.begin(), sectionStamp_.end(), 0);
      stamp_ = 1;
    }
    for (uint32_t c : touched_) {
      for (uint32_t k = sections_.first[c]; k <= sections_.last[c]; ++k) {
        if (sectionStamp_[k] == stamp_) continue;
        sectionStamp_[k] = stamp_;
        uint64_t lowest = UINT64_MAX;
        for (uint32_t m : members_[k]) {
          if (offset_[m] == kUnplaced) lowest = std::min(lowest, minOffset_[m]);
        }
        if (lowest != UINT64_MAX && floor_[k] < lowest) {
          floorUndo_.emplace_back(k, floor_[k]);
          floor_[k] = lowest;
        }
      }
    }
  }

  void unplace(uint32_t b, size_t offsetMark, size_t floorMark) {
    while (floorUndo_.size() > floorMark) {
      floor_[floorUndo_.back().first] = floorUndo_.back().second;
      floorUndo_.pop_back();
    }
    if (!graph_) {
      for (uint32_t k = sections_.first[b]; k <= sections_.last[b]; ++k) total_[k] += p_.size[b];
    }
    while (offsetUndo_.size() > offsetMark) {
      minOffset_[offsetUndo_.back().first] = offsetUndo_.back().second;
      offsetUndo_.pop_back();
    }
    offset_[b] = kUnplaced;
  }

  const Problem& p_;
  size_t n_;
  bool graph_;
  uint64_t capacity_;
  SearchLimits limits_;
  Heuristic heuristic_ = kHeuristics[0];
  const std::vector<double>* hint_ = nullptr;
  std::vector<std::vector<uint32_t>> conflicts_;
  Sections sections_;
  std::vector<std::vector<uint32_t>> members_;  // per section: the buffers spanning it
  std::vector<uint64_t> floor_, total_;          // per section: lowest viable offset; unplaced bytes
  std::vector<uint32_t> cuts_;                   // per section boundary: unplaced buffers spanning it
  std::vector<uint64_t> minOffset_, offset_, solution_;
  std::vector<uint32_t> rank_;
  std::vector<uint32_t> touched_;
  std::vector<uint32_t> sectionStamp_;
  uint32_t stamp_ = 0;
  std::vector<std::pair<uint32_t, uint64_t>> offsetUndo_, floorUndo_;
  uint64_t nodes_ = 0, nodesLeft_ = 0;
};

}  // namespace

SearchOutcome searchWithin(const Problem& problem, uint64_t capacity, const SearchLimits& limits,
                           const std::vector<double>* hint, std::vector<uint64_t>* offsets, SearchStats* stats) {
  Search search(problem, capacity, limits);
  return search.run(hint, offsets, stats);
}

std::vector<std::vector<uint32_t>> partitions(const Problem& p) {
  std::vector<std::vector<uint32_t>> parts;
  const size_t n = p.count();
  if (p.isGraph()) {
    std::vector<bool> seen(n, false);
    for (uint32_t start = 0; start < n; ++start) {
      if (seen[start]) continue;
      std::vector<uint32_t> part{start};
      seen[start] = true;
      for (size_t i = 0; i < part.size(); ++i) {
        for (uint32_t c : p.neighbours[part[i]]) {
          if (!seen[c]) {
            seen[c] = true;
            part.push_back(c);
          }
        }
      }
      std::sort(part.begin(), part.end());
      parts.push_back(std::move(part));
    }
    return parts;
  }
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return p.lower[a] < p.lower[b]; });
  uint64_t reach = 0;
  for (uint32_t b : order) {
    if (parts.empty() || p.lower[b] >= reach) parts.emplace_back();
    parts.back().push_back(b);
    reach = std::max(reach, p.upper[b]);
  }
  for (auto& part : parts) std::sort(part.begin(), part.end());
  return parts;
}

Problem subProblem(const Problem& p, const std::vector<uint32_t>& buffers) {
  Problem sub;
  std::vector<uint32_t> renumber(p.count(), UINT32_MAX);
  for (uint32_t i = 0; i < buffers.size(); ++i) renumber[buffers[i]] = i;
  for (uint32_t b : buffers) {
    sub.size.push_back(p.size[b]);
    if (p.isGraph()) {
      std::vector<uint32_t> list;
      for (uint32_t c : p.neighbours[b]) {
        if (renumber[c] != UINT32_MAX) list.push_back(renumber[c]);
      }
      std::sort(list.begin(), list.end());
      sub.neighbours.push_back(std::move(list));
    } else {
      sub.lower.push_back(p.lower[b]);
      sub.upper.push_back(p.upper[b]);
    }
  }
  return sub;
}

}  // namespace tp::planner

#include "planner/strategies.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>

#include "os/os.h"
#include "planner/genetic.h"
#include "planner/place.h"
#include "planner/search.h"
#include "planner/strip.h"

namespace tp::planner {

namespace {

// The TFLite / XLA baseline: largest first, each in the smallest sufficient gap.
std::vector<uint64_t> greedyBySize(const Problem& p, uint64_t deadline = UINT64_MAX) {
  return Placer(p).place(sizeOrder(p), Fit::Best, deadline);
}

// S1: operators in decreasing order of memory need; each reuses the lowest memory no mutually exclusive
// operator holds, extending past the current top only by what it lacks. Every block stays contiguous.
std::vector<uint64_t> s1(const Problem& p, uint64_t deadline = UINT64_MAX) {
  return Placer(p).place(sizeOrder(p), Fit::First, deadline);
}

// Above this many buffers the exact search is not attempted (its nodes cost O(n log n) each).
constexpr size_t kExactSearchMax = 4000;

struct Candidate {
  std::vector<uint64_t> offsets;
  uint64_t peak = UINT64_MAX;
  std::string how;
  std::string log;  // every attempt: what, height, time
};

void consider(Candidate& best, std::vector<uint64_t> offsets, const Problem& p, const std::string& how, uint64_t sinceNs) {
  const uint64_t peak = heightOf(p, offsets);
  best.log += (best.log.empty() ? "" : "; ") + how + " " + std::to_string(peak) + " in " +
              std::to_string((os::monotonicNs() - sinceNs) / 1000000) + " ms";
  if (peak < best.peak) {
    best.offsets = std::move(offsets);
    best.peak = peak;
    best.how = how;
  }
}

// Ranks for the lowest-first constructor: larger key first.
std::vector<uint32_t> rankBy(const Problem& p, const std::vector<double>& key) {
  const std::vector<uint32_t> order = orderBy(p, key);
  std::vector<uint32_t> rank(p.count());
  for (uint32_t r = 0; r < order.size(); ++r) rank[order[r]] = r;
  return rank;
}

// Per buffer: size, area (size x lifetime; graphs: size x conflicts), and the heaviest section total it
// spans (how crowded its busiest moment is).
struct Keys {
  std::vector<double> size, area, crowd;
};

Keys keysOf(const Problem& p) {
  Keys k;
  const size_t n = p.count();
  k.size.resize(n);
  k.area.resize(n);
  k.crowd.resize(n);
  Sections sections;
  // The section loads as a tree of maxima (leaves from `leaves` on): a buffer's heaviest section in
  // O(log S), where a walk over its sections costs O(S) for a buffer live throughout.
  std::vector<uint64_t> maxima;
  size_t leaves = 0;
  if (!p.isGraph()) {
    sections = buildSections(p);
    const std::vector<uint64_t> loads = sectionLoads(p, sections);
    leaves = loads.size();
    maxima.resize(2 * leaves);
    std::copy(loads.begin(), loads.end(), maxima.begin() + static_cast<std::ptrdiff_t>(leaves));
    for (size_t i = leaves; i-- > 1;) maxima[i] = std::max(maxima[2 * i], maxima[2 * i + 1]);
  }
  const auto heaviestIn = [&](size_t from, size_t to) {  // sections [from, to]
    uint64_t heaviest = 0;
    for (from += leaves, to += leaves + 1; from < to; from /= 2, to /= 2) {
      if (from & 1) heaviest = std::max(heaviest, maxima[from++]);
      if (to & 1) heaviest = std::max(heaviest, maxima[--to]);
    }
    return heaviest;
  };
  for (uint32_t b = 0; b < n; ++b) {
    k.size[b] = static_cast<double>(p.size[b]);
    k.area[b] = p.width(b) * k.size[b];
    uint64_t heaviest = p.size[b];
    if (!p.isGraph()) heaviest = std::max(heaviest, heaviestIn(sections.first[b], sections.last[b]));
    // Crowd first, area second (a lexicographic order within a double: area is below 2^53 / 2^20 here).
    k.crowd[b] = static_cast<double>(heaviest) * 1048576.0 + k.area[b] / (k.area[b] + 1.0);
  }
  return k;
}

// The constructive heuristics while time remains: a first layout in O(n log n) (interval problems), then
// the lowest-first constructor under three ranks, then the greedy baselines. Until one of them has
// given a layout, each runs to completion; after, they give up at the deadline. Greedy by size always
// runs to completion, as S2 and S3 start from it: `best` is never above the baseline (a loaded machine
// spent a fuzz case's whole limit on the first layout, 77 against greedy's 50).
Candidate constructive(const Problem& p, uint64_t deadline, uint64_t lowerBound) {
  Candidate best;
  const Keys keys = keysOf(p);
  uint64_t limit = UINT64_MAX;
  struct Attempt {
    const char* name;
    std::function<std::vector<uint64_t>()> run;
    bool always;  // runs whatever the time
  };
  const Attempt attempts[] = {
      {"online best fit in time order", [&] { return placeOnline(p); }, false},
      {"lowest offset first by area", [&] { return placeLowestFirst(p, rankBy(p, keys.area), limit); }, false},
      {"lowest offset first by section total", [&] { return placeLowestFirst(p, rankBy(p, keys.crowd), limit); }, false},
      {"lowest offset first by size", [&] { return placeLowestFirst(p, rankBy(p, keys.size), limit); }, false},
      {"greedy by size", [&] { return greedyBySize(p); }, true},
      {"size order first fit", [&] { return s1(p, limit); }, false},
  };
  for (const auto& [name, run, always] : attempts) {
    if (!best.offsets.empty() && best.peak <= lowerBound) break;
    if (!best.offsets.empty() && !always && os::monotonicNs() > deadline) continue;
    const uint64_t since = os::monotonicNs();
    std::vector<uint64_t> offsets = run();
    if (!offsets.empty()) consider(best, std::move(offsets), p, name, since);
    if (!best.offsets.empty()) limit = deadline;
  }
  return best;
}

// Lowest-first constructions under randomly perturbed ranks (size x lifetime^alpha, with noise) until the
// deadline: on large real instances the rank decides the fragmentation, and no fixed rank is best.
void restarts(const Problem& p, uint64_t seed, uint64_t deadline, uint64_t lowerBound, Candidate& incumbent) {
  const size_t n = p.count();
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0, 1);
  std::vector<double> key(n);
  int tries = 0;
  while (os::monotonicNs() < deadline && incumbent.peak > lowerBound) {
    const double alpha = unit(rng), noise = unit(rng) * 0.5;
    for (uint32_t b = 0; b < n; ++b) key[b] = static_cast<double>(p.size[b]) * std::pow(p.width(b), alpha) * (1 + noise * unit(rng));
    std::vector<uint64_t> offsets = placeLowestFirst(p, rankBy(p, key), deadline);
    if (offsets.empty()) break;
    const uint64_t peak = heightOf(p, offsets);
    ++tries;
    if (peak < incumbent.peak) {
      incumbent.offsets = std::move(offsets);
      incumbent.peak = peak;
      incumbent.how = "lowest offset first, perturbed rank (restart " + std::to_string(tries) + ")";
    }
  }
  incumbent.log += "; " + std::to_string(tries) + " perturbed restarts";
}

// The greatest common divisor of the sizes: every height worth trying is a multiple of it (a layout can
// be shifted down onto multiples of it without overlaps appearing).
uint64_t sizeGranule(const Problem& p) {
  uint64_t g = 0;
  for (uint64_t size : p.size) g = std::gcd(g, size);
  return std::max<uint64_t>(g, 1);
}

LowerBound lowerBoundFor(const Problem& p, const PlanOptions& options) {
  return options.knownLowerBound > 0 ? LowerBound{options.knownLowerBound, true} : lowerBound(p);
}

// Our strongest: the constructive portfolio, then MiniMalloc-style exact search for problems it can
// handle (at the lower bound, then a binary search on the capacity), else perturbed restarts, until the
// time is up.
PlanResult best(const Problem& p, const PlanOptions& options, uint64_t start) {
  PlanResult result;
  result.lowerBound = lowerBoundFor(p, options);
  const uint64_t deadline = start + options.timeLimitMs * 1000000ull;
  Candidate incumbent = constructive(p, deadline, result.lowerBound.value);
  std::string notes = "constructive: " + incumbent.log;
  uint64_t provenBelow = result.lowerBound.exact ? result.lowerBound.value : 0;  // no layout is lower than this
  std::string probes;
  auto remaining = [&] { const uint64_t now = os::monotonicNs(); return now < deadline ? deadline - now : 0; };
  auto probe = [&](uint64_t capacity, uint64_t budgetNs) {
    SearchLimits limits;
    limits.deadlineNs = os::monotonicNs() + budgetNs;
    std::vector<uint64_t> offsets;
    const uint64_t probeStart = os::monotonicNs();
    const SearchOutcome outcome = searchWithin(p, capacity, limits, nullptr, &offsets, nullptr);
    probes += (probes.empty() ? "" : ", ") + std::to_string(capacity) + (outcome == SearchOutcome::Found ? " found" : outcome == SearchOutcome::Infeasible ? " infeasible" : " undecided") +
              " (" + std::to_string((os::monotonicNs() - probeStart) / 1000000) + " ms)";
    if (outcome == SearchOutcome::Found) {
      const uint64_t peak = heightOf(p, offsets);
      if (peak < incumbent.peak) incumbent = {std::move(offsets), peak, "exact search", incumbent.log};
    }
    if (outcome == SearchOutcome::Infeasible) provenBelow = std::max(provenBelow, capacity + 1);
    return outcome;
  };

  if (p.count() <= kExactSearchMax && incumbent.peak > provenBelow) {
    // Heights are multiples of the granule; probe those only (the lower bound rounded up first).
    const uint64_t granule = sizeGranule(p);
    const auto up = [&](uint64_t v) { return (v + granule - 1) / granule * granule; };
    if (probe(up(result.lowerBound.value), remaining() / 4) == SearchOutcome::Infeasible) provenBelow = std::max(provenBelow, up(result.lowerBound.value) + 1);
    uint64_t lo = up(result.lowerBound.value) + granule, hi = incumbent.peak - granule;
    while (lo <= hi && incumbent.peak > provenBelow && remaining() > 5'000'000) {
      const uint64_t mid = lo + (hi - lo) / granule / 2 * granule;
      const SearchOutcome outcome = probe(mid, std::min(remaining(), std::max<uint64_t>(remaining() / 3, 50'000'000)));  // never past the deadline
      if (outcome == SearchOutcome::Found) hi = std::min(hi, incumbent.peak - granule);
      else lo = mid + granule;  // infeasible (proven) or not decided in its budget
    }
    notes += "; exact search probes: " + probes + "; best " + std::to_string(incumbent.peak) + " by " + incumbent.how +
             (provenBelow > result.lowerBound.value ? ", nothing below " + std::to_string(provenBelow) + " exists" : "");
  } else if (incumbent.peak > provenBelow) {
    restarts(p, options.seed, deadline, provenBelow, incumbent);
    notes = "constructive: " + incumbent.log + "; best " + std::to_string(incumbent.peak) + " by " + incumbent.how;
  }
  result.offsets = std::move(incumbent.offsets);
  result.optimal = result.lowerBound.exact && heightOf(p, result.offsets) <= provenBelow;
  result.notes = notes;
  return result;
}

}  // namespace

PlanResult planOffsets(const Problem& problem, const PlanOptions& options) {
  const uint64_t start = os::monotonicNs();
  const uint64_t greedyDeadline = options.timeLimitsGreedy ? start + options.timeLimitMs * 1000000ull : UINT64_MAX;
  PlanResult result;
  switch (options.strategy) {
    case Strategy::GreedySize:
      result.offsets = greedyBySize(problem, greedyDeadline);
      result.order = sizeOrder(problem);
      result.notes = "size order, best fit";
      break;
    case Strategy::S1:
      result.offsets = s1(problem, greedyDeadline);
      result.order = sizeOrder(problem);
      result.notes = "size order, lowest non-conflicting offset";
      break;
    case Strategy::S2:
      result = stripPacking(problem, options.timeLimitMs, start);
      break;
    case Strategy::S3:
      result = geneticSearch(problem, options.timeLimitMs, options.seed, start);
      break;
    case Strategy::Best:
      result = best(problem, options, start);
      break;
  }
  if (result.offsets.empty() && problem.count() > 0) {
    result.notes += ": stopped at the time limit";
    result.elapsedNs = os::monotonicNs() - start;
    return result;
  }
  if (options.strategy != Strategy::Best) {
    result.lowerBound = lowerBoundFor(problem, options);
    result.optimal = result.lowerBound.exact && heightOf(problem, result.offsets) == result.lowerBound.value;
  }
  result.peak = heightOf(problem, result.offsets);
  result.elapsedNs = os::monotonicNs() - start;
  return result;
}

}  // namespace tp::planner

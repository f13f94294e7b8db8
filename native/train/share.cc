#include "train/share.h"

#include <algorithm>
#include <map>
#include <utility>

#include "core/header.h"
#include "planner/strategies.h"

namespace tp {

namespace {

// Turns an interval problem into a graph: each buffer's neighbours are the buffers live beside it, plus
// `extra`. False when there would be more than kMaxGraphConflicts pairs.
bool toConflictGraph(planner::Problem* problem, const ExtraConflicts& extra) {
  const size_t n = problem->count();
  std::vector<uint32_t> byStart(n), byEnd(n);
  for (uint32_t b = 0; b < n; ++b) byStart[b] = byEnd[b] = b;
  std::sort(byStart.begin(), byStart.end(), [&](uint32_t a, uint32_t b) { return problem->lower[a] < problem->lower[b]; });
  std::sort(byEnd.begin(), byEnd.end(), [&](uint32_t a, uint32_t b) { return problem->upper[a] < problem->upper[b]; });
  std::vector<std::vector<uint32_t>> neighbours(n);
  std::vector<uint32_t> live;
  std::vector<size_t> liveAt(n);
  uint64_t pairs = extra.size();
  size_t ended = 0;
  for (uint32_t b : byStart) {
    for (; ended < n && problem->upper[byEnd[ended]] <= problem->lower[b]; ++ended) {
      const uint32_t gone = byEnd[ended];  // started before b: its lifetime is not empty
      live[liveAt[gone]] = live.back();
      liveAt[live.back()] = liveAt[gone];
      live.pop_back();
    }
    if ((pairs += live.size()) > kMaxGraphConflicts) return false;
    for (uint32_t c : live) {
      neighbours[b].push_back(c);
      neighbours[c].push_back(b);
    }
    liveAt[b] = live.size();
    live.push_back(b);
  }
  for (const auto& [a, b] : extra) {
    neighbours[a].push_back(b);
    neighbours[b].push_back(a);
  }
  for (auto& list : neighbours) {
    std::sort(list.begin(), list.end());
    list.erase(std::unique(list.begin(), list.end()), list.end());
  }
  problem->neighbours = std::move(neighbours);
  problem->lower.clear();
  problem->upper.clear();
  return true;
}

}  // namespace

SharedResult trainTimeShared(const TrainInput& input, uint64_t searchMs, const ExtraConflicts& extra, uint64_t layoutMs) {
  SharedResult result;
  std::vector<uint64_t> own(input.count);
  planner::Problem problem;
  problem.size.resize(input.count);
  problem.lower.resize(input.count);
  problem.upper.resize(input.count);
  for (size_t t = 0; t < input.count; ++t) {
    own[t] = roundUp(static_cast<uint64_t>(input.sizes[t]), input.interval);
    problem.size[t] = kHeaderBytes + roundUp(own[t], kBlockAlign);
    problem.lower[t] = static_cast<uint64_t>(input.starts[t]);
    problem.upper[t] = std::max(problem.lower[t] + 1, static_cast<uint64_t>(input.ends[t]));
  }
  planner::PlanOptions options;
  if (!extra.empty()) {
    // The lifetimes alone are a relaxation of the graph: their bound holds for it too.
    options.knownLowerBound = planner::lowerBound(problem).value;
    if (!toConflictGraph(&problem, extra)) return result;
  }
  options.strategy = planner::Strategy::GreedySize;
  options.timeLimitMs = layoutMs;
  options.timeLimitsGreedy = layoutMs > 0;
  planner::PlanResult placed = planner::planOffsets(problem, options);
  if (placed.offsets.empty()) return result;
  const uint64_t bound = placed.lowerBound.value;
  if (searchMs > 0 && placed.peak > bound + bound / 100) {
    options.strategy = planner::Strategy::Best;
    options.timeLimitMs = searchMs;
    planner::PlanResult searched = planner::planOffsets(problem, options);
    if (searched.peak < placed.peak) placed = std::move(searched);
  }

  std::vector<uint64_t> classSizes = own;
  std::sort(classSizes.begin(), classSizes.end());
  classSizes.erase(std::unique(classSizes.begin(), classSizes.end()), classSizes.end());
  auto classOf = [&](uint64_t size) {
    return static_cast<uint32_t>(std::lower_bound(classSizes.begin(), classSizes.end(), size) - classSizes.begin());
  };

  std::map<std::pair<uint32_t, uint64_t>, uint32_t> blockAt;  // (class, offset) -> block
  std::vector<uint64_t> blocksOfClass(classSizes.size(), 0);
  result.plan.interval = input.interval;
  result.plan.schedule.resize(input.count);
  for (size_t t = 0; t < input.count; ++t) {
    const uint64_t offset = placed.offsets[t];
    if (offset % kBlockAlign != 0) return result;
    const uint32_t cls = classOf(own[t]);
    auto [it, added] = blockAt.try_emplace({cls, offset}, static_cast<uint32_t>(result.plan.layout.size()));
    if (added) {
      result.plan.layout.push_back({cls, offset});
      blocksOfClass[cls]++;
    }
    result.plan.schedule[t] = {static_cast<uint64_t>(input.sizes[t]), cls, it->second};
  }
  for (size_t c = 0; c < classSizes.size(); ++c) result.plan.classes.push_back({classSizes[c], blocksOfClass[c]});
  result.arenaBytes = placed.peak;
  result.ok = true;
  return result;
}

}  // namespace tp

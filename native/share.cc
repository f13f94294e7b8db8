#include "share.h"

#include <algorithm>
#include <map>
#include <utility>

#include "header.h"
#include "planner/strategies.h"

namespace tp {

SharedResult trainTimeShared(const TrainInput& input, uint64_t searchMs) {
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
  options.strategy = planner::Strategy::GreedySize;
  planner::PlanResult placed = planner::planOffsets(problem, options);
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

#include "core/classes.h"

#include <algorithm>

#include "core/header.h"

namespace tp {

PlanSpec defaultPlan() {
  PlanSpec plan;
  plan.interval = 0;
  plan.classes.push_back({64, 0});
  for (uint64_t base = 128; base < (uint64_t{64} << 20); base *= 2) {
    for (uint64_t step = 0; step < 4; ++step) plan.classes.push_back({base + step * (base / 4), 0});
  }
  plan.classes.push_back({uint64_t{64} << 20, 0});
  return plan;
}

// Pre: sortedSizes are the plan's class sizes, ascending.
static bool checkLayout(const PlanSpec& plan, const std::vector<uint64_t>& sortedSizes, std::string* error) {
  std::vector<uint64_t> expected(sortedSizes.size(), 0), placed(sortedSizes.size(), 0);
  for (const PlanClass& c : plan.classes) {
    const size_t at = static_cast<size_t>(std::lower_bound(sortedSizes.begin(), sortedSizes.end(), c.size) - sortedSizes.begin());
    expected[at] = c.blocks;
  }
  constexpr uint64_t kMaxOffset = uint64_t{1} << 47;
  for (size_t b = 0; b < plan.layout.size(); ++b) {
    const PlacedBlock& block = plan.layout[b];
    if (block.classIndex >= sortedSizes.size() || block.offset % kBlockAlign != 0 || block.offset > kMaxOffset) {
      *error = "layout block " + std::to_string(b) + ": no class " + std::to_string(block.classIndex) +
               ", or its offset " + std::to_string(block.offset) + " is not a multiple of 64 below 128 TiB";
      return false;
    }
    placed[block.classIndex]++;
  }
  for (size_t c = 0; c < sortedSizes.size(); ++c) {
    if (placed[c] != expected[c]) {
      *error = "the layout places " + std::to_string(placed[c]) + " blocks of class " + std::to_string(c) + " (" +
               std::to_string(sortedSizes[c]) + " bytes); the plan has " + std::to_string(expected[c]);
      return false;
    }
  }
  return true;
}

static unsigned log2Floor(uint64_t v) { return 63u - static_cast<unsigned>(__builtin_clzll(v)); }

bool SizeClassTable::build(const PlanSpec& plan, std::string* error) {
  constexpr uint64_t kMaxClassBytes = uint64_t{1} << 40;  // 1 TiB: no single block is larger
  constexpr size_t kMaxClasses = 65535;
  constexpr size_t kMaxLut = size_t{1} << 12;

  if (plan.classes.empty()) {
    *error = "a plan needs at least one class";
    return false;
  }
  if (plan.classes.size() > kMaxClasses) {
    *error = "a plan may have at most 65535 classes, this one has " + std::to_string(plan.classes.size());
    return false;
  }
  std::vector<uint64_t> sizes;
  sizes.reserve(plan.classes.size());
  for (size_t i = 0; i < plan.classes.size(); ++i) {
    const uint64_t size = plan.classes[i].size;
    if (size == 0 || size > kMaxClassBytes) {
      *error = "class " + std::to_string(i) + ": size must be between 1 byte and 1 TiB, got " + std::to_string(size);
      return false;
    }
    if (plan.interval != 0 && size % plan.interval != 0) {
      *error = "class " + std::to_string(i) + ": size " + std::to_string(size) + " is not a multiple of the interval " +
               std::to_string(plan.interval);
      return false;
    }
    sizes.push_back(size);
  }
  std::sort(sizes.begin(), sizes.end());
  for (size_t i = 1; i < sizes.size(); ++i) {
    if (sizes[i] == sizes[i - 1]) {
      *error = "class size " + std::to_string(sizes[i]) + " appears twice";
      return false;
    }
  }

  for (size_t k = 0; k < plan.schedule.size(); ++k) {
    const ScheduleEntry& entry = plan.schedule[k];
    if (entry.classIndex >= sizes.size() || entry.size == 0 || entry.size > sizes[entry.classIndex]) {
      *error = "schedule entry " + std::to_string(k) + ": class " + std::to_string(entry.classIndex) +
               " does not exist or cannot hold " + std::to_string(entry.size) + " bytes";
      return false;
    }
    if (entry.block != ScheduleEntry::kAnyBlock &&
        (entry.block >= plan.layout.size() || plan.layout[entry.block].classIndex != entry.classIndex)) {
      *error = "schedule entry " + std::to_string(k) + ": block " + std::to_string(entry.block) +
               " is not a block of class " + std::to_string(entry.classIndex) + " in the layout";
      return false;
    }
  }
  for (size_t i = 0; i < plan.iterationStarts.size(); ++i) {
    const uint64_t start = plan.iterationStarts[i];
    if ((i == 0 ? start != 0 : start < plan.iterationStarts[i - 1]) || start > plan.schedule.size()) {
      *error = "iteration start " + std::to_string(i) + " is out of order or beyond the schedule";
      return false;
    }
  }
  if (plan.cycle < 1 || plan.cycle > std::max<size_t>(plan.iterationStarts.size(), 1)) {
    *error = "the cycle of iterations that repeat (" + std::to_string(plan.cycle) + ") must be 1 to the " +
             std::to_string(std::max<size_t>(plan.iterationStarts.size(), 1)) + " iterations of the schedule";
    return false;
  }
  if (!plan.layout.empty() && !checkLayout(plan, sizes, error)) return false;
  if (plan.spanReserve > kMaxClassBytes) {
    *error = "the span reserve (" + std::to_string(plan.spanReserve) + " bytes) is above 1 TiB";
    return false;
  }

  uint64_t spacing = sizes[0];
  for (size_t i = 1; i < sizes.size(); ++i) spacing = std::min(spacing, sizes[i] - sizes[i - 1]);
  if (plan.interval != 0) spacing = std::min(spacing, plan.interval);
  unsigned shift = log2Floor(spacing);
  while (((sizes.back() - 1) >> shift) + 1 > kMaxLut) ++shift;

  std::vector<uint16_t> lut(((sizes.back() - 1) >> shift) + 1);
  size_t cls = 0;
  for (size_t q = 0; q < lut.size(); ++q) {
    const uint64_t smallest = (static_cast<uint64_t>(q) << shift) + 1;
    while (sizes[cls] < smallest) ++cls;
    lut[q] = static_cast<uint16_t>(cls);
  }

  interval_ = plan.interval;
  sizes_ = std::move(sizes);
  granuleShift_ = shift;
  lut_ = std::move(lut);
  return true;
}

}  // namespace tp

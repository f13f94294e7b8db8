#include "core/offset_arena.h"

#include "core/header.h"

namespace tp {

std::unique_ptr<OffsetArena> OffsetArena::create(const OffsetSchedule& schedule, const ArenaOptions& options,
                                                 std::string* error) {
  constexpr uint64_t kMaxHeight = uint64_t{1} << 46;
  if (schedule.sizes.size() != schedule.offsets.size()) {
    *error = "the offset schedule's sizes and offsets differ in length";
    return nullptr;
  }
  if (schedule.height == 0 || schedule.height > kMaxHeight) {
    *error = "the offset plan's height must be between 1 byte and 64 TiB";
    return nullptr;
  }
  for (size_t k = 0; k < schedule.sizes.size(); ++k) {
    const uint64_t size = schedule.sizes[k], offset = schedule.offsets[k];
    if (size == 0 || offset % kBlockAlign != 0 || offset > schedule.height || size > schedule.height - offset) {
      *error = "offset schedule entry " + std::to_string(k) + " (" + std::to_string(size) + " bytes at " +
               std::to_string(offset) + ") is not a 64-byte aligned block inside the height " + std::to_string(schedule.height);
      return nullptr;
    }
  }
  std::unique_ptr<OffsetArena> arena(new OffsetArena());
  arena->schedule_ = schedule;
  arena->arena_ = Arena::create(schedule.height, schedule.height, options, error);
  if (!arena->arena_) return nullptr;
  // Carve the whole height at once (the reservation is page-rounded, so it holds it): every planned
  // block is then inside the carved range.
  if (!arena->arena_->carve(roundUp(schedule.height, kBlockAlign), error)) return nullptr;
  return arena;
}

void* OffsetArena::take(uint64_t k, uint64_t bytes, uint64_t serial) {
  if (k >= schedule_.sizes.size() || schedule_.sizes[k] != bytes) return nullptr;
  const uint64_t start = schedule_.offsets[k], end = start + bytes;
  // Free right now? The live block starting at or after `start`, and the one before it.
  auto next = live_.lower_bound(start);
  if (next != live_.end() && next->first < end) return nullptr;
  if (next != live_.begin() && std::prev(next)->second.end > start) return nullptr;
  const Block block{end, bytes, serial, false};
  if (spare_.empty()) {
    live_.emplace_hint(next, start, block);
  } else {
    Blocks::node_type node = std::move(spare_.back());
    spare_.pop_back();
    node.key() = start;
    node.mapped() = block;
    live_.insert(next, std::move(node));
  }
  return arena_->base() + start;
}

OffsetArena::Block* OffsetArena::live(const void* data) {
  if (!arena_->contains(data)) return nullptr;
  const auto it = live_.find(offsetOf(data));
  return it == live_.end() || it->second.deferred ? nullptr : &it->second;
}

void OffsetArena::give(const void* data) { spare_.push_back(live_.extract(offsetOf(data))); }

}  // namespace tp

// Pool's side of the front cache (lib/pool/front-cache.ts): its log applied in order, and what the cache may
// serve without asking.
#include "core/pool.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "core/arena.h"
#include "os/os.h"

namespace tp {

void Pool::applyCached(const CachedOp* ops, size_t count) {
  const Locked lock(*this);
  for (size_t i = 0; i < count; i++) applyCachedLocked(ops[i]);
}

void Pool::applyCachedLocked(const CachedOp& op) {
  BlockHeader* header = findLocked(op.data);
  if (!header || header->origin != Origin::Arena) {
    counters_.cacheRejected++;
    return;
  }
  if (op.bytes == 0) {
    if (header->state != BlockState::Live) {
      counters_.cacheRejected++;
      return;
    }
    countReleaseLocked(header->serial, header->requested);
    generationLocked(header->arenaId)->cache(header);
    counters_.cachedBlocks++;
    counters_.cachedBytes += header->capacity;
    return;
  }
  if (header->state != BlockState::Cached || op.bytes > header->capacity) {
    counters_.cacheRejected++;
    return;
  }
  uncacheLocked(header);
  SizeClassPool& generation = *generationLocked(header->arenaId);
  const Source source = generation.reuse(header, op.bytes);
  // As alloc() would have: the schedule's position moves on, and the block counts where it was served from.
  bool scheduled = false;
  if (&generation == generations_.back().get() && !generation.schedules().empty()) {
    const ScheduleEntry* entry = generation.schedules().next(&scheduleCursor_, op.bytes);
    scheduled = entry && entry->classIndex == header->classIndex;
    if (scheduled) counters_.scheduleHits++; else counters_.scheduleMisses++;
  }
  cursor_++;
  counted(header->data(), op.bytes, header->serial, countSourceLocked(source, scheduled));
}

int64_t Pool::upcoming(Upcoming* out, size_t max) const {
  const Locked lock(*this);
  // A closed pool may have unmapped every arena (an attached handle still asks after its refused alloc).
  if (counters_.closed || generations_.empty()) return -1;
  const Schedules& schedules = generations_.back()->schedules();
  if (schedules.empty()) return -1;
  const ScheduleEntry* entries[kUpcomingMax];
  max = std::min(max, kUpcomingMax);
  const size_t n = schedules.upcoming(scheduleCursor_, entries, max);
  for (size_t i = 0; i < n; ++i) out[i] = {*entries[i], schedules.keeps(entries[i])};
  return static_cast<int64_t>(n);
}

ReleaseStatus Pool::returnCached(const void* data) {
  const Locked lock(*this);
  BlockHeader* header = findLocked(data);
  if (!header) return ReleaseStatus::NotOwned;
  if (header->state != BlockState::Cached) return ReleaseStatus::NotLive;
  uncacheLocked(header);
  returnBlockLocked(header);
  return ReleaseStatus::Ok;
}

void Pool::uncacheLocked(const BlockHeader* header) {
  counters_.cachedBlocks--;
  counters_.cachedBytes -= header->capacity;
}

}  // namespace tp

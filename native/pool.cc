#include "pool.h"

#include <algorithm>

#include "os.h"

namespace tp {

std::shared_ptr<Pool> Pool::create(const PlanSpec& plan, const PoolOptions& options, std::string* error) {
  std::shared_ptr<Pool> pool(new Pool(options, os::randomSeed()));
  auto generation =
      SizeClassPool::create(1, pool->secret_, plan, options.arena, options.grow, options.growReserve, error);
  if (!generation) return nullptr;
  pool->generations_.push_back(std::move(generation));
  return pool;
}

Pool::~Pool() {
  for (BlockHeader* header : osLive_) {
    if (header->origin == Origin::OsMap) {
      os::unmapMemory(header, header->osLength);
    } else {
      os::freeHeap(header);
    }
  }
}

Allocation Pool::alloc(uint64_t bytes) {
  if (bytes == 0 || bytes > kMaxRequest) return {AllocStatus::BadSize};
  std::lock_guard<std::mutex> lock(mu_);
  if (counters_.closed) return {AllocStatus::Closed};
  SizeClassPool& serving = *generations_.back();
  Source source = Source::Own;
  BlockHeader* header = nullptr;
  const std::vector<ScheduleEntry>& schedule = serving.schedule();
  if (cursor_ < schedule.size()) {
    const ScheduleEntry& entry = schedule[cursor_];
    // entry.size <= its class's size was checked when the plan was built; equality with bytes makes the
    // scheduled block large enough.
    if (entry.size == bytes) header = serving.takeFrom(entry.classIndex, bytes, &source);
    if (header) counters_.scheduleHits++; else counters_.scheduleMisses++;
  }
  cursor_++;
  if (!header) header = serving.take(bytes, &source);
  if (!header) {
    return allocFromOs(bytes, bytes > serving.table().largest() ? Route::OsOversize : Route::OsFallback);
  }
  header->serial = nextSerial_++;
  counters_.allocs++;
  counters_.liveBlocks++;
  counters_.bytesLive += bytes;
  if (counters_.bytesLive > counters_.peakBytesLive) counters_.peakBytesLive = counters_.bytesLive;
  Route route = Route::Own;
  switch (source) {
    case Source::Own: counters_.hits++; break;
    case Source::Borrowed: counters_.borrows++; route = Route::Borrowed; break;
    case Source::Grown: counters_.grown++; counters_.hits++; route = Route::Grown; break;
  }
  return {AllocStatus::Ok, header->data(), header->serial, route};
}

// Called with mu_ held.
Allocation Pool::allocFromOs(uint64_t bytes, Route route) {
  BlockHeader* header;
  uint64_t length;
  Origin origin;
  if (bytes >= options_.osMapThreshold) {
    length = roundUp(kHeaderBytes + bytes, os::pageSize());
    header = static_cast<BlockHeader*>(os::mapMemory(length, os::pageSize()));
    origin = Origin::OsMap;
  } else {
    length = kHeaderBytes + roundUp(bytes, kBlockAlign);
    header = static_cast<BlockHeader*>(os::allocateHeap(length, kBlockAlign));
    origin = Origin::OsHeap;
  }
  if (!header) return {AllocStatus::OutOfMemory};
  *header = BlockHeader{};
  header->check = secret_ ^ reinterpret_cast<uintptr_t>(header);
  header->origin = origin;
  header->state = BlockState::Live;
  header->classIndex = UINT16_MAX;
  header->capacity = length - kHeaderBytes;
  header->requested = bytes;
  header->serial = nextSerial_++;
  header->osLength = length;
  osLive_.insert(header);

  counters_.allocs++;
  counters_.liveBlocks++;
  counters_.bytesLive += bytes;
  if (counters_.bytesLive > counters_.peakBytesLive) counters_.peakBytesLive = counters_.bytesLive;
  counters_.osLiveBlocks++;
  counters_.osLiveBytes += bytes;
  if (route == Route::OsOversize) counters_.osOversize++; else counters_.osFallbacks++;
  return {AllocStatus::Ok, header->data(), header->serial, route};
}

BlockHeader* Pool::findLocked(const void* data) const {
  for (const auto& generation : generations_) {
    if (BlockHeader* header = generation->headerOf(data)) return header;
  }
  // Integer arithmetic: `data` may not point into any block, and then data - 64 is no valid pointer.
  auto* candidate = reinterpret_cast<BlockHeader*>(reinterpret_cast<uintptr_t>(data) - kHeaderBytes);
  return osLive_.count(candidate) ? candidate : nullptr;
}

SizeClassPool* Pool::generationLocked(uint32_t id) const {
  for (const auto& generation : generations_) {
    if (generation->id() == id) return generation.get();
  }
  return nullptr;
}

ReleaseStatus Pool::release(const void* data) {
  std::lock_guard<std::mutex> lock(mu_);
  return releaseLocked(data, 0, false);
}

ReleaseStatus Pool::releaseIfSerial(const void* data, uint64_t serial) {
  std::lock_guard<std::mutex> lock(mu_);
  ReleaseStatus status = releaseLocked(data, serial, true);
  if (status == ReleaseStatus::Ok) counters_.finalized++;
  return status;
}

uint64_t Pool::liveSize(const void* data) {
  std::lock_guard<std::mutex> lock(mu_);
  BlockHeader* header = findLocked(data);
  return header && header->state == BlockState::Live ? header->requested : 0;
}

ReleaseStatus Pool::releaseLocked(const void* data, uint64_t serial, bool bySerial) {
  BlockHeader* header = findLocked(data);
  if (!header) return ReleaseStatus::NotOwned;
  if (header->state != BlockState::Live) return ReleaseStatus::NotLive;
  if (bySerial && header->serial != serial) return ReleaseStatus::Stale;
  counters_.releases++;
  counters_.liveBlocks--;
  counters_.bytesLive -= header->requested;
  returnBlockLocked(header);
  return ReleaseStatus::Ok;
}

void Pool::returnBlockLocked(BlockHeader* header) {
  if (header->origin == Origin::Arena) {
    generationLocked(header->arenaId)->give(header);
    dropDrainedLocked();
    return;
  }
  counters_.osLiveBlocks--;
  counters_.osLiveBytes -= header->requested;
  osLive_.erase(header);
  if (header->origin == Origin::OsMap) {
    os::unmapMemory(header, header->osLength);
  } else {
    os::freeHeap(header);
  }
}

// Unmaps every arena that no longer serves and has no block outstanding. The newest arena serves until the
// pool is closed; older ones only drain.
void Pool::dropDrainedLocked() {
  const auto draining = generations_.begin() + static_cast<std::ptrdiff_t>(
                                                   counters_.closed ? generations_.size() : generations_.size() - 1);
  const auto kept = std::remove_if(generations_.begin(), draining,
                                   [](const auto& generation) { return generation->outstandingBlocks() == 0; });
  generations_.erase(kept, draining);
}

void Pool::beginIteration() {
  std::lock_guard<std::mutex> lock(mu_);
  cursor_ = 0;
  counters_.iterations++;
}

void Pool::close() {
  std::lock_guard<std::mutex> lock(mu_);
  counters_.closed = true;
  dropDrainedLocked();
}

PoolStats Pool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  PoolStats s = counters_;
  for (const auto& generation : generations_) {
    s.arenaBytes += generation->arena().carvedBytes();
    s.reservedBytes += generation->arena().reservedBytes();
    s.committedBytes += generation->arena().committedBytes();
  }
  s.arenas = generations_.size();
  return s;
}

std::vector<ClassStats> Pool::classStats() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ClassStats> out;
  if (counters_.closed || generations_.empty()) return out;
  const SizeClassPool& serving = *generations_.back();
  for (size_t i = 0; i < serving.table().count(); ++i) out.push_back({serving.table().size(i), serving.counters()[i]});
  return out;
}

uint64_t Pool::interval() const {
  std::lock_guard<std::mutex> lock(mu_);
  return generations_.empty() ? 0 : generations_.back()->table().interval();
}

}  // namespace tp

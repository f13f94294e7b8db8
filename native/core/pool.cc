#include "core/pool.h"

#include <algorithm>
#include <new>
#include <cerrno>
#include <cstring>

#include "core/arena.h"
#include "core/mix.h"
#include "os/os.h"
#include "os/probes.h"

namespace tp {

namespace {
// Every pool of the process, held weakly: Pool::owning() looks a pointer up among them. Never destroyed: a
// static with a destructor registers it with atexit() when first reached, and the preload library's pool
// is first made inside whatever malloc the threshold routes to it -- such as the one glibc's atexit() makes
// under its own lock, which then deadlocked (node with TENSORPOOL_MIN_BYTES=1K).
std::mutex registryMu;
std::vector<std::weak_ptr<Pool>>& registry() {
  static auto* pools = new std::vector<std::weak_ptr<Pool>>();
  return *pools;
}
}  // namespace

std::shared_ptr<Pool> Pool::owning(const void* data, uint64_t* bytes) {
  std::lock_guard<std::mutex> lock(registryMu);
  auto& pools = registry();
  pools.erase(std::remove_if(pools.begin(), pools.end(), [](const auto& w) { return w.expired(); }), pools.end());
  for (const auto& weak : pools) {
    if (auto pool = weak.lock()) {
      if (const uint64_t size = pool->liveSize(data)) {
        *bytes = size;
        return pool;
      }
    }
  }
  return nullptr;
}

std::shared_ptr<Pool> Pool::create(const PlanSpec& plan, const PoolOptions& options, std::string* error,
                                   const OffsetSchedule* offsets) {
  std::shared_ptr<Pool> pool(new Pool(options, os::randomSeed()));
  auto generation =
      SizeClassPool::create(1, pool->secret_, plan, options.arena, options.growth, options.growReserve, error);
  if (!generation) return nullptr;
  pool->generations_.push_back(std::move(generation));
  pool->generations_.back()->schedules().begin(&pool->scheduleCursor_, 0);
  pool->scheduleCursor_.startUp = true;  // not after a switch: a plan then starts on any iteration
  pool->counters_.generation = 1;
  if (offsets && !offsets->empty()) {
    pool->offsetArena_ = OffsetArena::create(*offsets, options.arena, error);
    if (!pool->offsetArena_) return nullptr;
  }
  pool->updateQueueableLocked();  // nobody else holds it yet
  std::lock_guard<std::mutex> lock(registryMu);
  registry().push_back(pool);
  return pool;
}

Pool::~Pool() {
  for (auto& [stream, queue] : deferred_) {
    for (Deferred& d : queue) events_.recycle(d.event);
  }
  for (BlockHeader* header : osLive_) unmapOsBlock(header);
  for (BlockHeader* header : zombies_) unmapOsBlock(header);
}

Allocation Pool::alloc(uint64_t bytes, int32_t cachedUpTo) {
  if (bytes == 0 || bytes > kMaxRequest) return {AllocStatus::BadSize};
  const Locked lock(*this);
  if (counters_.closed) return {AllocStatus::Closed};
  if (counters_.deferredPending != 0) reclaimLocked();  // S4: completed pairs first
  decayLocked();
  if (cachedUpTo >= 0 && !offsetArena_) {
    // Where the block would come from, looked up on a copy of the schedule's cursor: nothing changes yet.
    const SizeClassPool& serving = *generations_.back();
    Schedules::Cursor probe = scheduleCursor_;
    const ScheduleEntry* entry = serving.schedules().empty() ? nullptr : serving.schedules().next(&probe, bytes);
    const auto cachedFrom = [cachedUpTo](int cls) { return cls >= 0 && cls <= cachedUpTo; };
    // A time-shared schedule names a block: held by the cache (for a request of another length), or under a
    // cached block that shares its memory, it goes back first.
    int giveBackFrom = entry && entry->block != ScheduleEntry::kAnyBlock ? serving.cachedBlocking(entry->block) : -1;
    if (!cachedFrom(giveBackFrom)) {
      const int wanted = entry ? static_cast<int>(entry->classIndex) : serving.table().firstFitting(bytes);
      giveBackFrom = cachedFrom(wanted) && !serving.hasFree(static_cast<size_t>(wanted)) ? wanted : -1;
    }
    if (giveBackFrom >= 0) {
      Allocation miss{AllocStatus::WouldMiss};
      miss.classIndex = giveBackFrom;
      return miss;
    }
  }
  const uint64_t position = cursor_++;
  if (offsetArena_ && position < offsetArena_->positions()) {
    if (void* data = offsetArena_->take(position, bytes, nextSerial_)) {
      counters_.offsetHits++;
      return counted(data, bytes, nextSerial_++, Route::Offset);
    }
    counters_.offsetMisses++;
  }
  SizeClassPool& serving = *generations_.back();
  Source source = Source::Own;
  BlockHeader* header = nullptr;
  const ScheduleEntry* entry = nullptr;
  if (!serving.schedules().empty()) {
    // The entry asked for `bytes`, and the plan was checked to hold each entry in its class (and block).
    if ((entry = serving.schedules().next(&scheduleCursor_, bytes))) {
      header = entry->block == ScheduleEntry::kAnyBlock ? serving.takeFrom(entry->classIndex, bytes, &source)
                                                        : serving.takeBlock(entry->block, bytes, &source);
    }
    if (header) counters_.scheduleHits++; else counters_.scheduleMisses++;
  }
  const bool scheduled = header != nullptr;
  if (!header) {
    const uint64_t grownBefore = serving.grownBytes();
    header = serving.take(bytes, &source);
    purgeForGrowthLocked(serving.grownBytes() - grownBefore, bytes);
  }
  if (!header) {
    const Allocation mapped = allocFromOs(bytes, bytes > serving.table().largest() ? Route::OsOversize : Route::OsFallback);
    if (mapped.status == AllocStatus::Ok) purgeForOsBlockLocked(bytes);
    return mapped;
  }
  header->serial = nextSerial_++;
  // A lent block is not cacheable: served again from the cache it would take its lender class's place,
  // which a schedule gives to another request. A time-shared block only where its schedule keeps it.
  const bool keptBySchedule = scheduled && entry->block != ScheduleEntry::kAnyBlock && serving.schedules().keeps(entry);
  // A span holds what its request asked for, not its class's size: a cache serving its class could overrun it.
  const bool cacheable = !offsetArena_ && !header->lent && !header->span && (!serving.timeShared() || keptBySchedule);
  return counted(header->data(), bytes, header->serial, countSourceLocked(source, scheduled), header->classIndex, cacheable,
                 keptBySchedule ? static_cast<int32_t>(entry->block) : -1, header->zero != 0);
}

// Called with mu_ held: counts where an arena block came from; `scheduled`: where the schedule put it.
Route Pool::countSourceLocked(Source source, bool scheduled) {
  switch (source) {
    case Source::Own: counters_.hits++; return Route::Own;
    case Source::GrownLent:
      counters_.grown++;
      [[fallthrough]];
    case Source::Borrowed:
      counters_.borrows++;
      if (!scheduled) counters_.unplannedBorrows++;
      return Route::Borrowed;
    case Source::Grown: counters_.grown++; counters_.hits++; return Route::Grown;
  }
  return Route::Own;
}

// Called with mu_ held: the counters every served allocation updates.
Allocation Pool::counted(void* data, uint64_t bytes, uint64_t serial, Route route, int32_t classIndex, bool cacheable,
                         int32_t block, bool zeroed) {
  TP_PROBE5(alloc, data, bytes, route, classIndex, serial);  // first: its arguments are where the call put them
  tally_.allocs++;
  tally_.bytes += bytes;
  // Summed over an iteration's sizes, the mix gives an order-independent hash of the multiset in which no
  // two small sets of sizes are likely to collide.
  tally_.sizeHash += mix64(bytes);
  recorder_.alloc(serial, bytes);
  counters_.allocs++;
  counters_.liveBlocks++;
  counters_.bytesLive += bytes;
  if (counters_.bytesLive > counters_.peakBytesLive) counters_.peakBytesLive = counters_.bytesLive;
  return {.status = AllocStatus::Ok, .data = data, .serial = serial, .route = route, .classIndex = classIndex, .block = block,
          .cacheable = cacheable, .zeroed = zeroed};
}

BlockHeader* Pool::findLocked(const void* data) const {
  for (const auto& generation : generations_) {
    if (BlockHeader* header = generation->headerOf(data)) return header;
  }
  // Integer arithmetic: `data` may not point into any block, and then data - 64 is no valid pointer.
  auto* candidate = reinterpret_cast<BlockHeader*>(reinterpret_cast<uintptr_t>(data) - kHeaderBytes);
  return osLive_.count(candidate) ? candidate : nullptr;
}

ReleaseStatus Pool::release(const void* data) {
  const Locked lock(*this);
  const ReleaseStatus status = releaseLocked(data, 0, false);
  decayLocked();
  return status;
}

ReleaseStatus Pool::releaseMoved(const void* data) {
  const Locked lock(*this);
  BlockHeader* header = offsetArena_ && offsetArena_->contains(data) ? nullptr : findLocked(data);
  // Read before the release: a draining arena may be unmapped by it (the serving one never is).
  const bool serving = header && !counters_.closed && header->origin == Origin::Arena && header->arenaId == generations_.back()->id();
  const ReleaseStatus status = releaseLocked(data, 0, false);
  if (status == ReleaseStatus::Ok && serving && decay_.on()) purgeLocked({PurgeReason::Moved, 0, header});
  decayLocked();
  return status;
}

ReleaseStatus Pool::releaseIfSerial(const void* data, uint64_t serial) {
  const Locked lock(*this);
  BlockHeader* header = offsetArena_ && offsetArena_->contains(data) ? nullptr : findLocked(data);
  if (header && header->state == BlockState::Cached && header->serial == serial) {
    // The front cache that held it is gone (its buffer was collected): nobody can reach the block.
    uncacheLocked(header);
    returnBlockLocked(header);
    return ReleaseStatus::Ok;
  }
  ReleaseStatus status = releaseLocked(data, serial, true);
  if (status == ReleaseStatus::Ok) counters_.finalized++;
  return status;
}

uint64_t Pool::liveSize(const void* data) {
  const Locked lock(*this);
  if (offsetArena_) {
    if (const OffsetArena::Block* block = offsetArena_->live(data)) return block->requested;
  }
  // A Cached block may already be its owner's again: a front cache serves it before telling the pool.
  BlockHeader* header = findLocked(data);
  return header && (header->state == BlockState::Live || header->state == BlockState::Cached) ? header->requested : 0;
}

ReleaseStatus Pool::releaseLocked(const void* data, uint64_t serial, bool bySerial) {
  if (offsetArena_ && offsetArena_->contains(data)) {
    const OffsetArena::Block* block = offsetArena_->live(data);
    if (!block) return ReleaseStatus::NotOwned;
    if (bySerial && block->serial != serial) return ReleaseStatus::Stale;
    countReleaseLocked(block->serial, block->requested);
    offsetArena_->give(data);
    dropDrainedLocked();
    return ReleaseStatus::Ok;
  }
  BlockHeader* header = findLocked(data);
  if (!header) return ReleaseStatus::NotOwned;
  if (header->state != BlockState::Live) return ReleaseStatus::NotLive;
  if (bySerial && header->serial != serial) return ReleaseStatus::Stale;
  countReleaseLocked(header->serial, header->requested);
  returnBlockLocked(header);
  return ReleaseStatus::Ok;
}

void Pool::countReleaseLocked(uint64_t serial, uint64_t bytes) {
  TP_PROBE2(release, serial, bytes);  // first: its arguments are where the call put them
  recordReleaseLocked(serial, nullptr);
  counters_.releases++;
  counters_.liveBlocks--;
  counters_.bytesLive -= bytes;
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
  // A moved block freed raises the mapping bound to its length, as glibc's mmap threshold rises (PoolOptions).
  if (header->moved && header->osLength > mappedFrom_ && header->osLength <= PoolOptions::kMappedFromMost) mappedFrom_ = header->osLength;
  if (pins_.load(std::memory_order_acquire) != 0) {
    zombies_.push_back(header);  // a stream task may still touch it: unmapped once unpinned
  } else {
    unmapOsBlock(header);
  }
}

IterationSummary Pool::markIteration() {
  const Locked lock(*this);
  recorder_.mark();
  IterationSummary ended = tally_;
  const uint64_t endedSizes = tally_.sizeHash;
  ended.sizeHash &= (uint64_t{1} << 53) - 1;  // exact in a JS number
  ended.osFallbacks = counters_.osFallbacks - tally_.osFallbacks;
  ended.osOversize = counters_.osOversize - tally_.osOversize;
  ended.unplannedBorrows = counters_.unplannedBorrows - tally_.unplannedBorrows;
  ended.grown = counters_.grown - tally_.grown;
  ended.liveBlocks = counters_.liveBlocks;
  ended.recorderEnd = recorder_.end();
  tally_ = IterationSummary{};
  tally_.osFallbacks = counters_.osFallbacks;
  tally_.osOversize = counters_.osOversize;
  tally_.unplannedBorrows = counters_.unplannedBorrows;
  tally_.grown = counters_.grown;
  cursor_ = 0;
  decay_.mark(nowLocked(), counters_.iterations == 0);
  // Start-up is over at the first mark: the span reserve keeps what is written in it from now on.
  if (!generations_.empty()) generations_.back()->keepSpanReserve();
  decayLocked();
  if (!generations_.empty()) {
    generations_.back()->schedules().begin(&scheduleCursor_, scheduleCursor_.iteration + 1, endedSizes, ended.allocs);
  }
  counters_.iterations++;
  TP_PROBE3(mark, counters_.iterations, ended.allocs, ended.bytes);
  if (prepared_) {
    ended.installed = prepared_->id();
    installLocked(std::move(prepared_));
  }
  return ended;
}

void Pool::close() {
  const Locked lock(*this);
  counters_.closed = true;
  prepared_.reset();
  dropDrainedLocked();
}

PoolStats Pool::stats() const {
  const Locked lock(*this);
  return statsLocked();
}

PoolStats Pool::statsLocked() const {
  PoolStats s = counters_;
  for (const auto& generation : generations_) {
    s.arenaBytes += generation->arena().carvedBytes();
    s.reservedBytes += generation->arena().reservedBytes();
    s.committedBytes += generation->arena().committedBytes();
  }
  s.arenas = generations_.size();
  if (prepared_) {  // holds memory already, though it serves nothing yet
    s.preparedGeneration = prepared_->id();
    s.reservedBytes += prepared_->arena().reservedBytes();
    s.committedBytes += prepared_->arena().committedBytes();
  }
  s.eventsCreated = events_.created();
  s.eventsReused = events_.reused();
  if (offsetArena_) {
    s.arenaBytes += offsetArena_->arena().carvedBytes();
    s.reservedBytes += offsetArena_->arena().reservedBytes();
    s.committedBytes += offsetArena_->arena().committedBytes();
    s.arenas++;
  }
  return s;
}

std::vector<ClassStats> Pool::classStats() const {
  const Locked lock(*this);
  std::vector<ClassStats> out;
  if (counters_.closed || generations_.empty()) return out;
  const SizeClassPool& serving = *generations_.back();
  for (size_t i = 0; i < serving.table().count(); ++i) out.push_back({serving.table().size(i), serving.counters()[i]});
  return out;
}

std::string Pool::lastRefusal() const {
  const Locked lock(*this);
  return lastRefusal_;
}

uint64_t Pool::interval() const {
  const Locked lock(*this);
  return generations_.empty() ? 0 : generations_.back()->table().interval();
}

}  // namespace tp

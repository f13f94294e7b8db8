#include "core/pool.h"

#include <algorithm>
#include <new>
#include <cerrno>
#include <cstring>

#include "core/arena.h"
#include "core/mix.h"
#include "os/os.h"

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
  pool->epochStartNs_ = pool->lastMarkNs_ = os::coarseMonotonicNs();  // decay's clock (decayStepLocked)
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

void Pool::unmapOsBlock(BlockHeader* header) {
  if (header->origin == Origin::OsMap) {
    os::unmapMemory(header, header->osLength);
  } else {
    os::freeHeap(header);
  }
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
  if (!header) header = serving.take(bytes, &source);
  if (!header) {
    return allocFromOs(bytes, bytes > serving.table().largest() ? Route::OsOversize : Route::OsFallback);
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

// Called with mu_ held, from frees too: best effort, so that a free never fails where memory is short (the
// spans' decay allocates; a span it was merging is then lost to the heap, SpanHeap::give says how).
void Pool::decayLocked() {
  try {
    decayStepLocked();
  } catch (const std::bad_alloc&) {
  }
}

bool Pool::decaysLocked() const {
  return !counters_.closed && options_.decayMs != PoolOptions::kNoDecay && !generations_.empty() && generations_.back()->decays();
}

uint64_t Pool::decayPeriodMsLocked() const {
  return options_.decayMs > UINT64_MAX / 1000000 / decayScale_ ? UINT64_MAX / 1000000 : options_.decayMs * decayScale_;
}

void Pool::decayStepLocked() {
  if (options_.decayMs == PoolOptions::kNoDecay || generations_.empty()) return;
  SizeClassPool& serving = *generations_.back();
  if (!serving.decays()) return;
  // The coarse clock (one tick late at most: an epoch of 1000 ms ends after 1000-1004): this runs on every
  // alloc and free, where monotonicNs() was 13% of a program of small objects' cycles at a threshold of 1
  // byte. Every timestamp decay compares (epochStartNs_, lastMarkNs_) is taken on it too: mixed with
  // monotonicNs(), a difference could wrap.
  const uint64_t now = os::coarseMonotonicNs();
  // The period, and the marks it needs, are decayScale_ times the options'.
  const uint64_t delay = decayPeriodMsLocked() * 1000000;
  const uint64_t marksStopped = std::max(delay, longestIterationNs_ > UINT64_MAX / 2 ? UINT64_MAX : 2 * longestIterationNs_);
  if (now - epochStartNs_ >= delay && (epochMarks_ >= PoolOptions::kDecayMarks * decayScale_ || now - lastMarkNs_ >= marksStopped)) {
    // Memory given back and handed out again since the last epoch ended was not idle, only used less often
    // than the period: the period doubles (up to kMaxDecayScale times), and halves after kQuietEpochs
    // epochs in a row without. (An inference service over shapes drawn at random purged and faulted its
    // rarer shapes' memory in again: 34 faults a request against 15 with no decay.)
    if (serving.takeRewarmed() != 0) {
      decayScale_ = std::min(decayScale_ * 2, PoolOptions::kMaxDecayScale);
      quietEpochs_ = 0;
    } else if (++quietEpochs_ >= PoolOptions::kQuietEpochs) {
      decayScale_ = std::max<uint64_t>(1, decayScale_ / 2);
      quietEpochs_ = 0;
    }
    serving.endDecayEpoch();
    epochStartNs_ = now;
    epochMarks_ = 0;
  }
  if (serving.hasDuePurges()) serving.purgeDue(PoolOptions::kPurgeBlocksPerCall, PoolOptions::kPurgeBytesPerCall, &counters_.purgedBlocks, &counters_.purgedBytes);
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

// Called with mu_ held.
Allocation Pool::allocFromOs(uint64_t bytes, Route route) {
  BlockHeader* header;
  uint64_t length;
  Origin origin;
  // A locked pool hands out locked memory only: its OS blocks are mapped (never from the C heap, whose pages
  // other data shares) and locked, or refused.
  const bool lock = options_.arena.lock;
  if (lock || route == Route::OsMoved || bytes >= options_.osMapThreshold) {
    length = roundUp(kHeaderBytes + bytes, os::pageSize());
    header = static_cast<BlockHeader*>(os::mapAccounted(length, os::pageSize()));  // malloc's accounting: no OOM later
    origin = Origin::OsMap;
    if (header && lock && os::lockMemory(header, length) != 0) {
      lastRefusal_ = lockRefusal(length, errno);
      os::unmapMemory(header, length);
      return {AllocStatus::OutOfMemory};
    }
  } else {
    length = kHeaderBytes + roundUp(bytes, kBlockAlign);
    header = static_cast<BlockHeader*>(os::allocateHeap(length, kBlockAlign));
    origin = Origin::OsHeap;
  }
  if (!header) {
    lastRefusal_ = origin == Origin::OsMap ? "mmap of " + std::to_string(length) + " bytes: " + strerror(errno)
                                           : "the C heap refused " + std::to_string(length) + " bytes";
    return {AllocStatus::OutOfMemory};
  }
  *header = BlockHeader{};
  header->check = secret_ ^ reinterpret_cast<uintptr_t>(header);
  header->origin = origin;
  header->state = BlockState::Live;
  header->classIndex = UINT16_MAX;
  header->capacity = length - kHeaderBytes;
  header->requested = bytes;
  header->serial = nextSerial_++;
  header->osLength = length;
  header->moved = route == Route::OsMoved ? 1 : 0;
  osLive_.insert(header);
  counters_.osLiveBlocks++;
  counters_.osLiveBytes += bytes;
  if (route == Route::OsOversize) counters_.osOversize++;
  else if (route == Route::OsMoved) counters_.movedToMappings++;
  else counters_.osFallbacks++;
  // A fresh mapping reads as zero; the C heap's memory may hold what it held before.
  return counted(header->data(), bytes, header->serial, route, -1, false, -1, origin == Origin::OsMap);
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
  const Locked lock(*this);
  const ReleaseStatus status = releaseLocked(data, 0, false);
  decayLocked();
  return status;
}

Pool::Locked::Locked(const Pool& pool) : Locked(pool, (pool.mu_.lock(), std::adopt_lock)) {}

Pool::Locked::Locked(const Pool& pool, std::adopt_lock_t) : pool_(const_cast<Pool&>(pool)) {  // a Pool is never const-made (create)
  pool_.applyQueuedLocked();
}

Pool::Locked::~Locked() { pool_.unlockApplyingQueued(); }

void Pool::unlockApplyingQueued() {
  mu_.unlock();
  // A release queued while the lock was held, by a thread whose own try after queueing found it still held:
  // applied here unless another thread takes the lock (and so applies it). The fence orders the unlock before
  // the load of queued_, as the queueing thread's count is ordered before its try (a locked instruction).
  for (int round = 0; round < 4; ++round) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (queued_.load(std::memory_order_relaxed) == 0 || !mu_.try_lock()) return;
    applyQueuedLocked();
    mu_.unlock();
  }
}

// Throws nothing: it runs in every call's lock, and after the lock is let go.
void Pool::applyQueuedLocked(bool all) noexcept {
  if (!all && queued_.load(std::memory_order_acquire) == 0) return;
  uint64_t applied = 0;
  for (auto& slot : queuedReleases_) {
    if (slot.load(std::memory_order_relaxed) == nullptr) continue;
    const void* data = slot.exchange(nullptr, std::memory_order_acq_rel);
    if (!data) continue;
    ++applied;
    ReleaseStatus status;
    try {
      status = releaseLocked(data, 0, false);
    } catch (...) {  // std::bad_alloc of the bookkeeping: reported as the process allocator's free() reports it
      status = ReleaseStatus::NotOwned;
    }
    if (status != ReleaseStatus::Ok && options_.queuedReleaseFailed) options_.queuedReleaseFailed(status);
  }
  if (all) queued_.store(0, std::memory_order_relaxed);  // alone: nobody is filling a slot
  else if (applied) queued_.fetch_sub(applied, std::memory_order_relaxed);
}

void Pool::updateQueueableLocked() {
  queueable_.store(!recorder_.on() && !offsetArena_ && !generations_.empty() && generations_.back()->schedules().empty(),
                   std::memory_order_release);
}

ReleaseStatus Pool::releaseSoon(const void* data) {
  if (!mu_.try_lock()) {
    if (queueable_.load(std::memory_order_acquire)) {
      queued_.fetch_add(1, std::memory_order_seq_cst);  // counted before it is filled: queued_ never undercounts
      // Threads freeing different blocks start at different slots.
      const size_t start = (reinterpret_cast<uintptr_t>(data) >> 6) % kQueuedSlots;
      for (size_t i = 0; i < kQueuedSlots; ++i) {
        std::atomic<const void*>& slot = queuedReleases_[(start + i) % kQueuedSlots];
        const void* empty = nullptr;
        if (slot.load(std::memory_order_relaxed) != nullptr || !slot.compare_exchange_strong(empty, data, std::memory_order_acq_rel)) continue;
        // Queued. Applied by whoever holds the lock next; if nobody holds it now, by this thread.
        if (mu_.try_lock()) {
          const Locked lock(*this, std::adopt_lock);
        }
        return ReleaseStatus::Ok;
      }
      queued_.fetch_sub(1, std::memory_order_relaxed);  // every slot full: wait for the lock
    }
    mu_.lock();
  }
  // Held: applied now, as release() does.
  const Locked lock(*this, std::adopt_lock);
  const ReleaseStatus status = releaseLocked(data, 0, false);
  decayLocked();
  return status;
}

void Pool::unlockAfterFork(bool child) {
  if (child) applyQueuedLocked(true);
  mu_.unlock();
}

ReleaseStatus Pool::releaseMoved(const void* data) {
  const Locked lock(*this);
  BlockHeader* header = offsetArena_ && offsetArena_->contains(data) ? nullptr : findLocked(data);
  // Read before the release: a draining arena may be unmapped by it (the serving one never is).
  const bool serving = header && !counters_.closed && header->origin == Origin::Arena && header->arenaId == generations_.back()->id();
  const ReleaseStatus status = releaseLocked(data, 0, false);
  if (status == ReleaseStatus::Ok && serving && options_.decayMs != PoolOptions::kNoDecay && generations_.back()->purgeGiven(header)) {
    counters_.purgedBlocks++;
    counters_.purgedBytes += header->capacity;
  }
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

bool Pool::resizeInPlace(const void* data, uint64_t bytes) {
  const Locked lock(*this);
  if (offsetArena_ || recorder_.on()) return false;
  BlockHeader* header = findLocked(data);
  if (!header || header->state != BlockState::Live || header->origin != Origin::Arena) return false;
  if (bytes > header->capacity) {
    if (header->requested < mappedFrom_ && bytes >= mappedFrom_) return false;
    // A span (the process pool's default classes) grows into free memory just after it, where there is some.
    SizeClassPool* generation = header->span ? generationLocked(header->arenaId) : nullptr;
    if (!generation || !generation->growSpan(header, bytes)) return false;
  }
  if (bytes < header->capacity / 2) return false;
  counters_.bytesLive = counters_.bytesLive - header->requested + bytes;
  if (counters_.bytesLive > counters_.peakBytesLive) counters_.peakBytesLive = counters_.bytesLive;
  header->requested = bytes;
  return true;
}

void* Pool::resizeMapped(const void* data, uint64_t bytes) {
  if (bytes == 0 || bytes > kMaxRequest) return nullptr;
  const Locked lock(*this);
  if (options_.arena.lock || recorder_.on() || pins_.load(std::memory_order_acquire) != 0) return nullptr;
  if (offsetArena_ && offsetArena_->contains(data)) return nullptr;
  BlockHeader* header = findLocked(data);
  if (!header || header->state != BlockState::Live || header->origin != Origin::OsMap) return nullptr;
  const uint64_t length = roundUp(kHeaderBytes + bytes, os::pageSize());
  auto* moved = static_cast<BlockHeader*>(os::remapAccounted(header, header->osLength, length));
  if (!moved) return nullptr;
  const uint64_t added = length > moved->osLength ? length - moved->osLength : 0;
  auto node = osLive_.extract(header);  // re-keyed, not erased and inserted: nothing here allocates (or throws)
  node.value() = moved;
  osLive_.insert(std::move(node));
  moved->check = secret_ ^ reinterpret_cast<uintptr_t>(moved);
  moved->capacity = length - kHeaderBytes;
  moved->osLength = length;
  counters_.osLiveBytes = counters_.osLiveBytes - moved->requested + bytes;
  counters_.bytesLive = counters_.bytesLive - moved->requested + bytes;
  if (counters_.bytesLive > counters_.peakBytesLive) counters_.peakBytesLive = counters_.bytesLive;
  moved->requested = bytes;
  purgeForMappingLocked(added);
  return moved->data();
}

bool Pool::spansGiveBackLocked() const {
  return options_.decayMs != PoolOptions::kNoDecay && !generations_.empty() && generations_.back()->schedules().empty();
}

void Pool::purgeForMappingLocked(uint64_t mappedBytes) {
  if (!spansGiveBackLocked()) return;
  // Growth a page at a time (a string appended to) gives back in steps of kPurgeForMappingStep, not at every call.
  mappedUnpurged_ += mappedBytes;
  if (mappedUnpurged_ < kPurgeForMappingStep) return;
  const uint64_t budget = std::min(mappedUnpurged_, PoolOptions::kPurgeBytesPerCall);
  mappedUnpurged_ = 0;  // a debt only to what is free now: memory freed later waits for decay as any other
  try {
    generations_.back()->purgeSpansFor(budget, &counters_.purgedBlocks, &counters_.purgedBytes);
  } catch (const std::bad_alloc&) {  // as decayLocked: what was given back stays given back
  }
}

bool Pool::tryPurgeSpansFor(uint64_t bytes) {
  if (!mu_.try_lock()) return false;
  const Locked lock(*this, std::adopt_lock);
  if (counters_.closed || !spansGiveBackLocked()) return true;
  try {
    generations_.back()->purgeSpanBytes(std::min(bytes, PoolOptions::kPurgeBytesPerCall), &counters_.purgedBlocks, &counters_.purgedBytes);
  } catch (const std::bad_alloc&) {  // as decayLocked: what was given back stays given back
  }
  return true;
}

void* Pool::allocMoved(uint64_t bytes) {
  if (bytes > kMaxRequest) return nullptr;
  const Locked lock(*this);
  if (bytes < mappedFrom_ || counters_.closed || offsetArena_ || !generations_.back()->schedules().empty()) return nullptr;
  const Allocation a = allocFromOs(bytes, Route::OsMoved);
  if (a.status != AllocStatus::Ok) return nullptr;
  purgeForMappingLocked(bytes);
  cursor_++;
  return a.data;
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
  recordReleaseLocked(serial, nullptr);
  counters_.releases++;
  counters_.liveBlocks--;
  counters_.bytesLive -= bytes;
}

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

// Unmaps every arena that no longer serves and has no block outstanding. The newest arena serves until the
// pool is closed; older ones only drain. Called from every release: it allocates nothing there (a free must
// not fail where the C library can give no memory: a vector built per call made glibc's tst-dynarray-fail
// abort under RLIMIT_AS), only to keep an arena whose populate is in flight, and then keeps it in
// generations_ should that fail.
void Pool::dropDrainedLocked() {
  if (pins_.load(std::memory_order_acquire) != 0) return;  // a stream task may still touch an arena
  const size_t draining = counters_.closed ? generations_.size() : generations_.size() - 1;
  size_t kept = 0;
  for (size_t i = 0; i < generations_.size(); ++i) {
    std::unique_ptr<SizeClassPool>& generation = generations_[i];
    bool drained = i < draining && generation->outstandingBlocks() == 0;
    if (drained && std::find(populating_.begin(), populating_.end(), generation->id()) != populating_.end()) {
      try {
        populatingDropped_.push_back(std::move(generation));  // unmapped once its populate is done with it
      } catch (const std::bad_alloc&) {
        drained = false;  // push_back moved nothing: kept, and dropped at a later release
      }
    }
    if (!drained) {
      if (kept != i) generations_[kept] = std::move(generation);  // a drained one there is unmapped now
      ++kept;
    }
  }
  generations_.resize(kept);  // shrinking: no allocation; the drained arenas left are unmapped
  if (counters_.closed && offsetArena_ && offsetArena_->liveBlocks() == 0) offsetArena_.reset();
}

ReleaseStatus Pool::releaseAfter(const void* data, const std::shared_ptr<Stream>& stream) {
  const Locked lock(*this);
  uint64_t bytes;
  if (offsetArena_ && offsetArena_->contains(data)) {
    OffsetArena::Block* block = offsetArena_->live(data);
    if (!block) return ReleaseStatus::NotOwned;
    bytes = block->requested;
    recordReleaseLocked(block->serial, stream.get());
    block->deferred = true;
  } else {
    BlockHeader* header = findLocked(data);
    if (!header) return ReleaseStatus::NotOwned;
    if (header->state != BlockState::Live) return ReleaseStatus::NotLive;
    bytes = header->requested;
    recordReleaseLocked(header->serial, stream.get());
    header->state = BlockState::Deferred;
  }
  counters_.releases++;
  counters_.liveBlocks--;
  counters_.bytesLive -= bytes;
  counters_.deferredPending++;
  counters_.deferredBytes += bytes;
  auto queue = std::find_if(deferred_.begin(), deferred_.end(), [&](const auto& q) { return q.first == stream.get(); });
  if (queue == deferred_.end()) {
    deferred_.emplace_back(stream.get(), std::deque<Deferred>{});
    queue = deferred_.end() - 1;
    stream->addObserver(weak_from_this());
  }
  queue->second.push_back({data, events_.record(stream), bytes});
  return ReleaseStatus::Ok;
}

uint64_t Pool::reclaim() {
  const Locked lock(*this);
  return reclaimLocked();
}

// Each stream's events pass in the order they were recorded: stop at the first that has not.
uint64_t Pool::reclaimLocked() {
  uint64_t returned = 0;
  for (auto& [stream, queue] : deferred_) {
    while (!queue.empty() && queue.front().event->passed()) {
      const Deferred d = queue.front();
      queue.pop_front();
      events_.recycle(d.event);
      counters_.deferredPending--;
      counters_.deferredBytes -= d.bytes;
      if (offsetArena_ && offsetArena_->contains(d.data)) {
        offsetArena_->give(d.data);
      } else {
        returnBlockLocked(findLocked(d.data));
      }
      ++returned;
    }
  }
  deferred_.erase(std::remove_if(deferred_.begin(), deferred_.end(), [](const auto& q) { return q.second.empty(); }),
                  deferred_.end());
  if (returned) dropDrainedLocked();
  return returned;
}

void Pool::onProgress(Stream&, uint64_t) {
  const Locked lock(*this);
  if (counters_.closed && counters_.deferredPending != 0) reclaimLocked();
}

std::shared_ptr<void> Pool::pin() {
  pins_.fetch_add(1, std::memory_order_acq_rel);
  std::shared_ptr<Pool> self = shared_from_this();
  return std::shared_ptr<void>(this, [self](void*) { self->unpin(); });
}

void Pool::unpin() {
  if (pins_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  const Locked lock(*this);
  if (pins_.load(std::memory_order_acquire) != 0) return;  // pinned again meanwhile
  for (BlockHeader* header : zombies_) unmapOsBlock(header);
  zombies_.clear();
  dropDrainedLocked();
}

void Pool::setEventPooling(bool pooling) {
  const Locked lock(*this);
  events_.setPooling(pooling);
}

void Pool::recordReleaseLocked(uint64_t serial, const Stream* stream) {
  if (recorder_.on()) recorder_.release(serial, stream ? recorder_.streamNumber(stream) : 0);
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
  const uint64_t now = os::coarseMonotonicNs();  // decay's clock (decayStepLocked)
  if (counters_.iterations != 0) longestIterationNs_ = std::max(longestIterationNs_, now - lastMarkNs_);
  lastMarkNs_ = now;
  epochMarks_++;
  // Start-up is over at the first mark: the span reserve keeps what is written in it from now on.
  if (!generations_.empty()) generations_.back()->keepSpanReserve();
  decayLocked();
  if (!generations_.empty()) {
    generations_.back()->schedules().begin(&scheduleCursor_, scheduleCursor_.iteration + 1, endedSizes, ended.allocs);
  }
  counters_.iterations++;
  if (prepared_) {
    ended.installed = prepared_->id();
    installLocked(std::move(prepared_));
  }
  return ended;
}

// Builds the classes of `plan` in a new arena without the lock: secret_ and options_ never change after
// creation, and mapping and pre-faulting take long.
std::unique_ptr<SizeClassPool> Pool::buildGeneration(const PlanSpec& plan, std::string* error) {
  {
    const Locked lock(*this);
    if (counters_.closed) {
      *error = "the pool is closed";
      return nullptr;
    }
  }
  ArenaOptions arena = options_.arena;
  if (populatesAfterSwitch()) arena.prefault = false;
  if (options_.growth == Growth::Off) return SizeClassPool::create(++lastGeneration_, secret_, plan, arena, Growth::Off, 0, error);
  // Room for what growth may carve (SizeClassPool::growthAllowed: twice the peak outstanding, plus slack),
  // not the whole reservation of the default classes: a draining generation keeps its reservation.
  const uint64_t reserve = options_.growReserve;
  uint64_t planned = 0, largest = 0;  // the classes' bytes, up to the reservation (create refuses a plan too large)
  for (const PlanClass& c : plan.classes) {
    const uint64_t stride = SizeClassPool::strideOf(c.size);
    planned = c.blocks > (reserve - planned) / stride ? reserve : planned + stride * c.blocks;
    largest = std::max(largest, c.size);
  }
  const uint64_t room = std::min(reserve, 2 * planned + (uint64_t{64} << 20));
  // The default classes above the plan's largest, with no block: a request larger than the plan knows (a
  // new input shape, until a re-plan lays it out) grows a block there instead of going to the OS each time.
  // Appended above every class, they leave the plan's class numbers (its schedule's, its layout's) as they are.
  PlanSpec grown = plan;
  for (const PlanClass& c : defaultPlan().classes) {
    const uint64_t size = plan.interval == 0 ? c.size : roundUp(c.size, plan.interval);
    if (size > largest) grown.classes.push_back({size, 0});
    largest = std::max(largest, size);
  }
  return SizeClassPool::create(++lastGeneration_, secret_, grown, arena, Growth::AfterBorrowing, room, error);
}

bool Pool::switchPlan(const PlanSpec& plan, std::string* error) {
  std::unique_ptr<SizeClassPool> generation = buildGeneration(plan, error);
  if (!generation) return false;
  {
    const Locked lock(*this);
    if (counters_.closed) {
      *error = "the pool was closed during the switch";
      return false;  // the new arena is unmapped as `generation` goes
    }
    installLocked(std::move(generation));
  }
  discardRetired();
  return true;
}

uint64_t Pool::prepareSwitch(const PlanSpec& plan, std::string* error) {
  std::unique_ptr<SizeClassPool> generation = buildGeneration(plan, error);
  if (!generation) return 0;
  const uint64_t id = generation->id();
  std::unique_ptr<SizeClassPool> replaced;  // unmapped after the lock is let go
  const Locked lock(*this);
  if (counters_.closed) {
    *error = "the pool was closed while the switch was prepared";
    replaced = std::move(generation);
    return 0;
  }
  // Preparations racing each other finish in any order: the newest (the largest id) is the one that waits,
  // so that a mark never installs an older plan after a newer one.
  if ((prepared_ && prepared_->id() > id) || generations_.back()->id() > id) {
    replaced = std::move(generation);
    return id;
  }
  replaced = std::move(prepared_);
  prepared_ = std::move(generation);
  return id;
}

uint64_t Pool::discardRetired() {
  std::vector<std::pair<const Arena*, std::vector<std::pair<char*, uint64_t>>>> work;
  std::pair<uint32_t, uint64_t> populate{0, 0};
  std::shared_ptr<void> pinned;  // no arena is unmapped while its pages are advised away or faulted in
  {
    const Locked lock(*this);
    for (uint32_t id : undiscarded_) {
      if (const SizeClassPool* generation = generationLocked(id)) work.emplace_back(&generation->arena(), generation->freeRanges());
    }
    undiscarded_.clear();
    std::swap(populate, unpopulated_);
    if (!work.empty() || populate.first != 0) pinned = pin();
  }
  uint64_t bytes = 0;
  for (const auto& [arena, ranges] : work) {
    for (const auto& [start, length] : ranges) {
      arena->discard(start, length);
      bytes += length;
    }
  }
  pinned.reset();  // the populate keeps its own arena mapped, and no other
  if (populate.first != 0) populateServing(populate.first, populate.second);
  return bytes;
}

uint64_t Pool::purgeAllLocked() {
  const uint64_t before = counters_.purgedBytes;
  try {
    generations_.back()->purgeAll(&counters_.purgedBlocks, &counters_.purgedBytes);
  } catch (const std::bad_alloc&) {  // as decayLocked: what was given back stays given back
  }
  return counters_.purgedBytes - before;
}

uint64_t Pool::trim() {
  const Locked lock(*this);
  if (counters_.closed || generations_.empty()) return 0;
  return purgeAllLocked();
}

DecayWatch Pool::decayTick() {
  if (!mu_.try_lock()) return DecayWatch::Busy;
  const Locked lock(*this, std::adopt_lock);
  if (!decaysLocked()) return DecayWatch::Off;
  // (Releases another thread queued before this one took the lock count as made: the caller may sleep
  // until the next release, which would not come for them.)
  applyQueuedLocked();
  decayLocked();
  const SizeClassPool& serving = *generations_.back();
  if (serving.hasDuePurges()) return DecayWatch::Due;
  if (serving.holdsIdle()) return DecayWatch::Idle;
  return serving.outstandingBlocks() != 0 ? DecayWatch::Live : DecayWatch::Nothing;
}

uint64_t Pool::quietFor(uint64_t ns) {
  if (!mu_.try_lock()) return 0;
  const Locked lock(*this, std::adopt_lock);
  if (!decaysLocked() || ns / 1000000 < decayPeriodMsLocked()) return 0;
  applyQueuedLocked();
  return purgeAllLocked();
}

uint64_t Pool::quietPeriodNs(uint64_t worthBytes) {
  if (!mu_.try_lock()) return 0;
  const Locked lock(*this, std::adopt_lock);
  if (!decaysLocked()) return 0;
  const uint64_t idle = generations_.back()->idleBytes();
  if (idle == 0 || idle < worthBytes) return 0;
  const uint64_t ms = decayPeriodMsLocked();
  return ms > UINT64_MAX / 1000000 ? UINT64_MAX : ms * 1000000;
}

uint64_t Pool::giveBackAddressSpace() {
  const Locked lock(*this);
  uint64_t released = 0;
  for (const auto& generation : generations_) {
    generation->uncarveFreeTail();
    released += generation->releaseSpare(0);
  }
  if (prepared_) released += prepared_->releaseSpare(0);
  return released;
}

uint64_t Pool::fitAddressSpace(uint64_t limit, uint64_t mapped) {
  const Locked lock(*this);
  auto spareOf = [](const SizeClassPool& generation) { return generation.arena().reservedBytes() - generation.arena().carvedBytes(); };
  uint64_t spares = 0;
  for (const auto& generation : generations_) spares += spareOf(*generation);
  if (prepared_) spares += spareOf(*prepared_);
  const uint64_t others = mapped > spares ? mapped - spares : 0;
  const uint64_t keep = limit > others ? (limit - others) / kLimitedSpareShare : 0;
  uint64_t released = 0;
  for (size_t i = 0; i < generations_.size(); ++i) released += generations_[i]->releaseSpare(i + 1 == generations_.size() ? keep : 0);
  if (prepared_) released += prepared_->releaseSpare(keep);
  return released;
}

void Pool::populateServing(uint32_t id, uint64_t bytes) {
  const Arena* arena;
  {
    const Locked lock(*this);
    if (counters_.closed || generations_.back()->id() != id) return;
    arena = &generations_.back()->arena();
    populating_.push_back(id);
  }
  // A chunk at a time, so that a newer switch or close() stops it: a retired arena is not made resident.
  constexpr uint64_t kChunk = uint64_t{32} << 20;
  for (uint64_t done = 0; done < bytes; done += kChunk) {
    if (!arena->populateInUse(arena->base() + done, std::min(kChunk, bytes - done))) break;
    const Locked lock(*this);
    if (counters_.closed || generations_.back()->id() != id) break;
  }
  std::unique_ptr<SizeClassPool> dropped;  // unmapped after the lock is let go
  const Locked lock(*this);
  populating_.erase(std::find(populating_.begin(), populating_.end(), id));
  for (auto it = populatingDropped_.begin(); it != populatingDropped_.end(); ++it) {
    if ((*it)->id() != id) continue;
    dropped = std::move(*it);
    populatingDropped_.erase(it);
    break;
  }
}

void Pool::installLocked(std::unique_ptr<SizeClassPool> generation) {
  counters_.generation = generation->id();
  counters_.switches++;
  generations_.back()->retire(false);
  undiscarded_.push_back(generations_.back()->id());
  unpopulated_ = populatesAfterSwitch() ? std::make_pair(generation->id(), generation->arena().carvedBytes()) : std::make_pair(0u, uint64_t{0});
  generations_.push_back(std::move(generation));
  generations_.back()->schedules().begin(&scheduleCursor_, 0);
  updateQueueableLocked();
  dropDrainedLocked();
}

void Pool::startRecording(uint64_t limit) {
  const Locked lock(*this);
  recorder_.start(limit);
  updateQueueableLocked();
}

void Pool::stopRecording() {
  const Locked lock(*this);
  recorder_.stop();
  updateQueueableLocked();
}

RecordingState Pool::recordingState() const {
  const Locked lock(*this);
  return {recorder_.on(), recorder_.truncated(), recorder_.begin(), recorder_.end()};
}

std::vector<RecordedEvent> Pool::copyRecording(uint64_t from) const {
  const Locked lock(*this);
  size_t count;
  const RecordedEvent* events = recorder_.from(from, &count);
  return std::vector<RecordedEvent>(events, events + count);
}

void Pool::visitRecording(uint64_t from, RecordingVisit visit, void* context) const {
  const Locked lock(*this);
  size_t count;
  const RecordedEvent* events = recorder_.from(from, &count);
  visit(events, count, {recorder_.on(), recorder_.truncated(), recorder_.begin(), recorder_.end()}, context);
}

void Pool::discardRecording(uint64_t before) {
  const Locked lock(*this);
  recorder_.discard(before);
}

void Pool::close() {
  const Locked lock(*this);
  counters_.closed = true;
  prepared_.reset();
  dropDrainedLocked();
}

PoolStats Pool::stats() const {
  const Locked lock(*this);
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

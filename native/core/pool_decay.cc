// Pool's turns of decay and its purges: the decay model (core/decay.h) asked on the pool's calls and its
// triggers' (decay's thread, a quiet program's sleeps, malloc_trim, memory beside the pool), one purge path
// with a reason and a budget (core/purge.h).
#include "core/pool.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "core/arena.h"
#include "os/os.h"

namespace tp {

// Called with mu_ held, from frees too: best effort, so that a free never fails where memory is short (the
// spans' decay allocates; a span it was merging is then lost to the heap, SpanHeap::give says how).
void Pool::decayTurnLocked() {
  try {
    decayStepLocked();
  } catch (const std::bad_alloc&) {
  }
}

bool Pool::decaysLocked() const {
  return !counters_.closed && decay_.on() && !generations_.empty() && generations_.back()->decays();
}

uint64_t Pool::nowOf(const PoolOptions& options) { return options.clock ? options.clock() : os::coarseMonotonicNs(); }

uint64_t Pool::purgeLocked(const PurgeRequest& request) {
  if (generations_.empty()) return 0;
  PurgeCounts counts{counters_.purgedBlocks, counters_.purgedBytes};
  const uint64_t bytes = purge(*generations_.back(), request, &counts);
  counters_.purgedBlocks = counts.blocks;
  counters_.purgedBytes = counts.bytes;
  return bytes;
}

void Pool::decayStepLocked() {
  if (!decay_.on() || generations_.empty()) return;
  SizeClassPool& serving = *generations_.back();
  if (!serving.decays()) return;
  const uint64_t now = nowLocked();
  if (decay_.epochEnded(now)) {
    // Memory given back and handed out again since the last epoch ended was not idle, only used less often
    // than the period: the model lengthens it.
    const uint64_t rewarmed = serving.takeRewarmed();
    counters_.rewarmedBytes += rewarmed;
    decay_.startEpoch(now, rewarmed != 0);
    serving.endDecayEpoch();
  }
  purgeLocked({PurgeReason::Decay});
}

bool Pool::spansGiveBackLocked() const {
  return decay_.on() && !generations_.empty() && generations_.back()->schedules().empty();
}

void Pool::purgeForMappingLocked(uint64_t mappedBytes) {
  if (!spansGiveBackLocked()) return;
  // Growth a page at a time (a string appended to) gives back in steps of kPurgeForMappingStep, not at every call.
  mappedUnpurged_ += mappedBytes;
  if (mappedUnpurged_ < kPurgeForMappingStep) return;
  const uint64_t owed = mappedUnpurged_;
  mappedUnpurged_ = 0;  // a debt only to what is free now: memory freed later waits for decay as any other
  purgeLocked({PurgeReason::MappedBeside, owed});
}

void Pool::purgeForGrowthLocked(uint64_t grownBytes, uint64_t bytes) {
  if (grownBytes == 0 || !spansGiveBackLocked()) return;
  // The request is not counted live yet: counted() adds it once the block is served.
  const uint64_t live = counters_.bytesLive - counters_.osLiveBytes + bytes;
  const uint64_t peak = std::max(counters_.peakBytesLive, counters_.bytesLive + bytes);
  const uint64_t resident = live + generations_.back()->idleBytes(), bound = peak + peak / kGrowthSlackDivisor;
  if (resident > bound) purgeLocked({PurgeReason::ArenaGrew, std::min(grownBytes, resident - bound)});
}

void Pool::purgeForOsBlockLocked(uint64_t bytes) {
  if (osBlocksKeepSpans_ || !spansGiveBackLocked()) return;
  // Handed out again since this rule's previous call, which purged: what was given back is wanted.
  const uint64_t reused = generations_.back()->takeRewarmedBeside();
  if (osBlockPurged_ && reused != 0) {
    osBlocksKeepSpans_ = true;
    return;
  }
  if (purgeLocked({PurgeReason::OsBlock, bytes}) != 0) osBlockPurged_ = true;
}

bool Pool::tryPurgeSpansFor(uint64_t bytes) {
  if (!mu_.try_lock()) return false;
  const Locked lock(*this, std::adopt_lock);
  if (counters_.closed || !spansGiveBackLocked()) return true;
  purgeLocked({PurgeReason::HeapBeside, bytes});
  return true;
}

uint64_t Pool::purgeAllLocked() { return purgeLocked({PurgeReason::All}); }

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
  if (!decaysLocked() || ns < decay_.periodNs()) return 0;
  applyQueuedLocked();
  return purgeAllLocked();
}

uint64_t Pool::quietPeriodNs(uint64_t worthBytes) {
  if (!mu_.try_lock()) return 0;
  const Locked lock(*this, std::adopt_lock);
  if (!decaysLocked()) return 0;
  const uint64_t idle = generations_.back()->idleBytes();
  if (idle == 0 || idle < worthBytes) return 0;
  return decay_.periodNs();
}

}  // namespace tp

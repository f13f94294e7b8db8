// Pool::gauges and SizeClassPool::addBySize (pool_gauges.h): the live view's figures, worked out when asked.
#include <mutex>

#include "core/pool.h"
#include "core/size_class_pool.h"

namespace tp {

bool Pool::gauges(PoolGauges* out, bool wait, SizeBuckets* bySize) const {
  if (wait) mu_.lock();
  else if (!mu_.try_lock()) return false;
  const Locked lock(*this, std::adopt_lock);
  const PoolStats s = statsLocked();
  *out = PoolGauges{};
  out->arenaBytes = s.arenaBytes;
  out->reservedBytes = s.reservedBytes;
  out->committedBytes = s.committedBytes;
  out->arenas = s.arenas;
  out->preparedGeneration = s.preparedGeneration;
  if (!generations_.empty() && !counters_.closed) {
    const SizeClassPool& serving = *generations_.back();
    if (serving.decays()) {
      out->idleBytes = serving.idleBytes();
    } else if (!serving.timeShared()) {  // a time-shared block's memory may lie under a live one
      for (size_t cls = 0; cls < serving.table().count(); ++cls) out->idleBytes += serving.counters()[cls].freeBlocks * serving.capacityOf(cls);
    }
  }
  const auto addRange = [out](const Arena& arena) {
    if (out->rangeCount < PoolGauges::kRanges && arena.carvedBytes() != 0) {
      out->ranges[out->rangeCount++] = {reinterpret_cast<uintptr_t>(arena.base()), arena.carvedBytes()};
    }
  };
  for (auto g = generations_.rbegin(); g != generations_.rend(); ++g) addRange((*g)->arena());
  if (prepared_) addRange(prepared_->arena());
  if (offsetArena_) addRange(offsetArena_->arena());
  if (!bySize) return true;
  *bySize = SizeBuckets{};
  for (const auto& generation : generations_) generation->addBySize(bySize, !counters_.closed && generation == generations_.back());
  for (const BlockHeader* header : osLive_) {
    SizeBucket& bucket = bySize->at(header->capacity);
    bucket.osBlocks++;
    bucket.osBytes += header->requested;
  }
  return true;
}

void SizeClassPool::addBySize(SizeBuckets* out, bool free) const {
  for (size_t cls = 0; cls < table_.count(); ++cls) {
    const ClassCounters& c = counters_[cls];
    const uint64_t capacity = capacityOf(cls);
    SizeBucket& bucket = out->at(capacity);
    const uint64_t live = c.blocks - c.freeBlocks - c.cached;
    bucket.liveBlocks += live + c.cached;
    bucket.liveBytes += (live + c.cached) * capacity;
    if (!free || c.freeBlocks == 0) continue;
    bucket.freeBlocks += c.freeBlocks;
    if (shared_) continue;  // a time-shared block's memory may lie under a live one: neither idle nor given back
    const uint64_t purged = decays_ && cls < decay_.size() ? decay_[cls].purged : 0;
    bucket.idleBytes += (c.freeBlocks - purged) * capacity;
    bucket.givenBackBytes += purged * capacity;
  }
  spanHeaders_.forEach([out](const BlockHeader& header) {
    if (header.state == BlockState::Free) return;  // free spans: below, from the heap
    SizeBucket& bucket = out->at(header.capacity);
    bucket.liveBlocks++;
    bucket.liveBytes += header.requested;
  });
  if (!free) return;
  for (const SpanHeap::Span& span : spans_.spans()) {
    SizeBucket& bucket = out->at(span.bytes);
    bucket.freeBlocks++;
    (span.zero ? bucket.givenBackBytes : bucket.idleBytes) += span.bytes;
  }
}

}  // namespace tp

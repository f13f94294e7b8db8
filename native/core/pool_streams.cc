// Pool's stream-ordered release (S4): a block released after a stream passes an event, reclaimed on
// allocation, and the pins stream tasks hold on the pool's memory.
#include "core/pool.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "core/arena.h"
#include "os/os.h"

namespace tp {

ReleaseStatus Pool::releaseAfter(const void* data, const std::shared_ptr<FenceQueue>& stream) {
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
    stream->watch(weak_from_this());
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

void Pool::onProgress(uint64_t) {
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

}  // namespace tp

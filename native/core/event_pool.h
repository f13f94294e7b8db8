// The event pool (S4). A deferred release records an event on the queue (a stream) the block was last used
// on; events come from this pool and go back to it once reclaimed, so new ones are made only when the pool
// is empty. An event is (queue, sequence number): passed when the queue has done that much work.
#pragma once

#include <cstdint>
#include <memory>

#include "core/fence.h"

namespace tp {

struct StreamEvent {
  std::shared_ptr<FenceQueue> queue;
  uint64_t sequence = 0;
  StreamEvent* next = nullptr;  // free list link
  bool passed() const { return queue->passed(sequence); }
};

// Not thread-safe: its pool's lock guards it.
class EventPool {
 public:
  EventPool() = default;
  ~EventPool();
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;

  // An event recorded on `queue` now: taken from the pool, or made when the pool is empty.
  StreamEvent* record(const std::shared_ptr<FenceQueue>& queue);
  // Back to the pool (its queue reference dropped).
  void recycle(StreamEvent* event);

  uint64_t created() const { return created_; }
  uint64_t reused() const { return reused_; }
  // With pooling off, every event is made and destroyed (for the benchmark's comparison).
  void setPooling(bool pooling) { pooling_ = pooling; }

 private:
  StreamEvent* free_ = nullptr;
  uint64_t created_ = 0, reused_ = 0;
  bool pooling_ = true;
};

}  // namespace tp

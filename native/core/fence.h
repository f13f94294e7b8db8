// What a stream-ordered release waits for (S4), as the pool sees it: an in-order queue of asynchronous work and
// a point in it. stream/ implements the queue (Stream, with a thread of its own); the pool knows only this, so
// that core depends on no particular kind of queue.
#pragma once

#include <cstdint>
#include <memory>

namespace tp {

// Told of a queue's progress (FenceQueue::watch), on the thread that made it.
class FenceWatcher {
 public:
  virtual ~FenceWatcher() = default;
  // The queue has done `completed` pieces of work so far.
  virtual void onProgress(uint64_t completed) = 0;
};

// An in-order queue of work: pieces are numbered 1, 2, ... as they are queued and done in that order.
// Threads: every call may come from any thread.
class FenceQueue {
 public:
  virtual ~FenceQueue() = default;
  // The number of the last piece queued: a fence recorded now has passed once passed(recorded()).
  virtual uint64_t recorded() const = 0;
  // Whether the queue has done piece `sequence` (and every one before it).
  virtual bool passed(uint64_t sequence) const = 0;
  // From now on `watcher` is told of progress, held weakly (one that is gone is forgotten); watching twice
  // is watching once.
  virtual void watch(const std::weak_ptr<FenceWatcher>& watcher) = 0;
};

}  // namespace tp

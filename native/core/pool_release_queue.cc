// Pool's lock and its release queue: a release that need not wait for the lock is queued where another
// thread holds it, and applied by whoever takes it next (core/pool.h, releaseSoon).
#include "core/pool.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "core/arena.h"
#include "os/os.h"

namespace tp {

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
void Pool::applyQueuedSlotsLocked(bool all) noexcept {
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

}  // namespace tp

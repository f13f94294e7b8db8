// The log of a front cache (lib/pool/front-cache.ts): memory shared by JS, which writes it through a
// Float64Array, and the binding, which applies it to the pool (Pool::applyCached) before anything else
// touches the pool from the JS thread. A cached alloc or release is then a few stores in JS, with no call
// into native code; the pool still sees every one of them, in order.
#pragma once

#include <napi.h>

#include <cstddef>
#include <memory>

#include "core/pool.h"
#include "handle_book.h"

namespace tp::napi {

class FrontCacheLog {
 public:
  static constexpr size_t kUpcomingMax = Pool::kUpcomingMax;
  static constexpr size_t kUpcomingFields = 4;
  // Slots of the shared array (doubles). The binding writes the reply slots on every alloc and the
  // generation whenever it may have changed; JS writes entries and the count.
  enum Slot : size_t {
    kCount = 0,         // entries pending
    kReplyAddress = 1,  // the block the last alloc served (or 0)
    kReplyClass = 2,    // its class when a cache may keep it, else -1; after a WouldMiss, the class from
                        // which cached blocks go back
    kReplyBlock = 3,    // its time-shared block number when a cache may keep it (Allocation::block), else -1
    kGeneration = 4,    // the serving generation: cached blocks of older ones go back
    // The serving plan's schedule: the entries a run that follows it takes next (Pool::upcoming), as
    // (size, class, block or -1, keep 0/1) from kUpcoming; -1 entries when it has none; kUpcomingMore 1 when
    // more may follow (JS settles for them). JS counts those it served in kUpcomingUsed.
    kUpcomingCount = 5,
    kUpcomingMore = 6,
    kUpcomingUsed = 7,
    kUpcoming = 8,
    // then (address, bytes) pairs: bytes > 0 for an allocation the cache served, 0 for a release into the
    // cache, -bytes for a block back to the pool (released by its owner, or given back by the cache) whose
    // handle, of `bytes`, the cache keeps dormant (HandleBook)
    kEntries = kUpcoming + kUpcomingFields * kUpcomingMax,
  };

  explicit FrontCacheLog(size_t capacity);
  // A Float64Array over the log, made once per log (it keeps the log alive).
  static Napi::Value view(Napi::Env env, const std::shared_ptr<FrontCacheLog>& log);

  // Applies the pending entries to `pool` in order and empties the log. Entries JS could not have written
  // (a count out of range, an address that is no integer) reach the pool as no block, which ignores them.
  // What was published stays true: the cache served only the entries it counted as used, in order, and
  // applying them moves the schedule's cursor over exactly those (a call that moves it further publishes).
  void drain(Pool& pool);
  HandleBook& book() { return book_; }
  void reply(const Allocation& a);
  // After anything that may move the schedule's cursor or change the serving classes (`generation`: the
  // classes serving now, 0 when unchanged): at most `window` entries.
  void publish(Pool& pool, uint64_t generation = 0, size_t window = kUpcomingMax);
  // After an allocation served natively: a few entries. Most allocations that follow one come from native code
  // as well (a block the cache does not hold), and each would publish again.
  static constexpr size_t kWindowAfterAlloc = 8;

 private:
  size_t capacity_;  // entries
  std::unique_ptr<double[]> slots_;
  HandleBook book_;
};

}  // namespace tp::napi

// The handles a pool's buffers are, and the ones its front cache keeps asleep (lib/pool/front-cache.ts).
//
// A block crosses into JS as an external ArrayBuffer whose finalizer holds a Ticket. Making that handle costs
// N-API about a microsecond, and a block the front cache may not keep (a time-shared block that another one
// sharing its memory is scheduled to take first, a lent block) paid it on every allocation. So when such a
// block is released, its handle is not detached: the cache moves it (transfer()) to a handle of its own,
// which nobody else can reach, and the block goes back to the pool. The handle is *dormant*: when the pool
// serves the same address with the same length again, that handle is handed out instead of a new one, and
// its ticket takes the new allocation's serial, so that the finalizer safety net follows it.
//
// The book mirrors the cache's dormant handles exactly: JS adds one only through keep() (a release entry of
// the log, FrontCacheLog::drain), drops one only through forget(), and takes one only where wake() found it
// (Alloc). The front cache's log keeps the book.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>

#include "core/pool.h"

namespace tp::napi {

class FrontCacheLog;

// Rides along with every external ArrayBuffer so that its finalizer can give back a block that was dropped
// without release. It names the allocation by serial number: after a release the block may already serve
// someone else, and then the finalizer must leave it alone. It also keeps the pool alive until the buffer
// is gone, so the arena is never unmapped under a live view.
// With a front cache, the block may have been handed out again by JS without native code knowing yet: the
// log is applied first.
struct Ticket {
  std::shared_ptr<Pool> pool;
  uint64_t serial;
  std::shared_ptr<FrontCacheLog> log;  // with a front cache, which keeps the HandleBook
  const void* data;
  uint64_t bytes;
  bool dormant = false;  // held by the front cache, its block back in the pool (HandleBook)
};

class HandleBook {
 public:
  // A handle was made for the allocation at `ticket->data`: the newest handle of its address and length.
  void made(Ticket* ticket) { tickets_[Key{ticket->data, ticket->bytes}] = ticket; }
  // The block at `data` went back to the pool and its live handle, of `bytes`, stays with the cache: false
  // when there is no such handle (nothing changes then).
  bool keep(const void* data, uint64_t bytes);
  // The pool served `data` with `bytes` again: true when the cache holds a dormant handle of exactly that,
  // which now stands for the allocation `serial`.
  bool wake(const void* data, uint64_t bytes, uint64_t serial);
  // The cache dropped its dormant handle of (data, bytes); forgetAll(): all of them.
  void forget(const void* data, uint64_t bytes);
  void forgetAll();
  // A handle was collected: the book no longer names its ticket.
  void finalized(const Ticket* ticket);

 private:
  struct Key {
    const void* data;
    uint64_t bytes;
    bool operator==(const Key& other) const { return data == other.data && bytes == other.bytes; }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const { return std::hash<const void*>()(k.data) ^ (std::hash<uint64_t>()(k.bytes) * 31); }
  };
  // The newest handle of each address and length: the live one while its allocation lives (a block is served
  // at one address to one owner at a time, so an older handle of the same key was released before it was
  // made), dormant once kept. Entries stay put across sleeps and wakes: a steady run only looks them up.
  std::unordered_map<Key, Ticket*, KeyHash> tickets_;
};

}  // namespace tp::napi

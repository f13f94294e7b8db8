// Block headers (S0 steps 4-5). Every block the pool hands out is preceded by one 64-byte header, so the
// data that follows stays 64-byte aligned and a release can be routed by reading the header alone:
//   - a block carved from an arena carries a *class header*: the class it belongs to (and whether it was
//     lent to a smaller request), so it goes back to that class's free list;
//   - a block the operating system gave us carries an *OS header*: how it was obtained and its length,
//     so it goes back to the OS the same way.
// Headers are only trusted after the pointer has been validated (SizeClassPool::headerOf for arena blocks,
// the pool's set of live OS blocks otherwise): a foreign pointer is never dereferenced.
#pragma once

#include <cstdint>

namespace tp {

constexpr uint64_t kBlockAlign = 64;  // every returned address is a multiple of this
constexpr uint64_t kHeaderBytes = 64;

enum class Origin : uint8_t { Arena = 1, OsHeap = 2, OsMap = 3 };
// Cached: released by its owner into a front cache (lib/pool/front-cache.ts) that will hand it out again; not
// free, so the pool does not serve it, and not live, so no release reaches it.
enum class BlockState : uint8_t { Free = 0, Live = 1, Deferred = 2, Cached = 3 };

struct alignas(64) BlockHeader {
  uint64_t check;         // pool secret ^ this header's address: tells our headers from arbitrary bytes
  Origin origin;
  BlockState state;
  uint16_t classIndex;    // arena: the class the block belongs to
  uint32_t arenaId;       // arena: which generation of the pool's arenas carved it
  uint64_t capacity;      // usable bytes after the header
  uint64_t requested;     // bytes the current owner asked for (0 when free)
  uint64_t serial;        // allocation serial number; a finalizer only releases the serial it was given
  BlockHeader* next;      // free list link (arena blocks) / deferred list link
  uint64_t osLength;      // OS: bytes obtained from the OS, header included
  uint8_t lent;           // arena: served to a request whose own class was another (a borrow)
  uint8_t zero;           // arena, free: its data reads as zero (never handed out since carved, or purged)
  uint8_t span;           // arena: a span of a Growth::Spans pool (SpanHeap), not a block of its class
  uint8_t pad;
  uint32_t slot;          // arena blocks of a time-shared pool: the block's record (SizeClassPool)

  char* data() { return reinterpret_cast<char*>(this) + kHeaderBytes; }
  static BlockHeader* of(void* data) {
    return reinterpret_cast<BlockHeader*>(static_cast<char*>(data) - kHeaderBytes);
  }
};

static_assert(sizeof(BlockHeader) == kHeaderBytes, "a header is exactly one 64-byte line");

constexpr uint64_t roundUp(uint64_t value, uint64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

}  // namespace tp

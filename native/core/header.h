// Block headers (S0 steps 4-5). Every block the pool hands out has one 64-byte header, so that a release
// can be routed by reading the header alone. It precedes the block's data (which stays 64-byte aligned),
// except for a span (Growth::Spans), whose header is kept out of line (SizeClassPool) and names its data:
//   - a block carved from an arena carries a *class header*: the class it belongs to (and whether it was
//     lent to a smaller request), so it goes back to that class's free list;
//   - a block the operating system gave us carries an *OS header*: how it was obtained and its length,
//     so it goes back to the OS the same way;
//   - a span of the default classes' arena carries a class header as well, out of line, so that a span holds
//     its data alone (a span of 2^k bytes then splits into two of 2^(k-1): with a header inside, neither
//     half could hold a request of 2^(k-1) bytes, and the power-of-two tensors of torch training left a
//     hole of each size short by 64 bytes).
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
  union {
    uint64_t osLength;    // OS: bytes obtained from the OS, header included
    char* spanData;       // arena, span (out of line): where its data starts
  };
  uint8_t lent;           // arena: served to a request whose own class was another (a borrow)
  uint8_t zero;           // arena, free: its data reads as zero (never handed out since carved, or purged)
  uint8_t span;           // arena: a span of a Growth::Spans pool (SpanHeap), not a block of its class
  uint8_t moved;          // OS: a block realloc moved out of an arena into this mapping (Pool::allocMoved)
  uint32_t slot;          // arena blocks of a time-shared pool: the block's record (SizeClassPool)

  char* data() { return span ? spanData : reinterpret_cast<char*>(this) + kHeaderBytes; }
};

static_assert(sizeof(BlockHeader) == kHeaderBytes, "a header is exactly one 64-byte line");

constexpr uint64_t roundUp(uint64_t value, uint64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

}  // namespace tp

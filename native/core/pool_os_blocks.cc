// Pool's blocks from the OS: the fallback (S0's second header), and a block realloc moves out of an arena
// into a mapping of its own, which the OS resizes (core/pool.h, allocMoved, resizeMapped).
#include "core/pool.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "core/arena.h"
#include "os/os.h"
#include "os/probes.h"

namespace tp {

void Pool::unmapOsBlock(BlockHeader* header) {
  if (header->origin == Origin::OsMap) {
    os::unmapMemory(header, header->osLength);
  } else {
    os::freeHeap(header);
  }
}

// Called with mu_ held.
Allocation Pool::allocFromOs(uint64_t bytes, Route route) {
  BlockHeader* header;
  uint64_t length;
  Origin origin;
  // A locked pool hands out locked memory only: its OS blocks are mapped (never from the C heap, whose pages
  // other data shares) and locked, or refused.
  const bool lock = options_.arena.lock;
  if (lock || route == Route::OsMoved || bytes >= options_.osMapThreshold) {
    length = roundUp(kHeaderBytes + bytes, os::pageSize());
    header = static_cast<BlockHeader*>(os::mapAccounted(length, os::pageSize()));  // malloc's accounting: no OOM later
    origin = Origin::OsMap;
    if (header && lock && os::lockMemory(header, length) != 0) {
      lastRefusal_ = lockRefusal(length, errno);
      os::unmapMemory(header, length);
      return {AllocStatus::OutOfMemory};
    }
  } else {
    length = kHeaderBytes + roundUp(bytes, kBlockAlign);
    header = static_cast<BlockHeader*>(os::allocateHeap(length, kBlockAlign));
    origin = Origin::OsHeap;
  }
  if (!header) {
    lastRefusal_ = origin == Origin::OsMap ? "mmap of " + std::to_string(length) + " bytes: " + strerror(errno)
                                           : "the C heap refused " + std::to_string(length) + " bytes";
    return {AllocStatus::OutOfMemory};
  }
  *header = BlockHeader{};
  header->check = secret_ ^ reinterpret_cast<uintptr_t>(header);
  header->origin = origin;
  header->state = BlockState::Live;
  header->classIndex = UINT16_MAX;
  header->capacity = length - kHeaderBytes;
  header->requested = bytes;
  header->serial = nextSerial_++;
  header->osLength = length;
  header->moved = route == Route::OsMoved ? 1 : 0;
  osLive_.insert(header);
  counters_.osLiveBlocks++;
  counters_.osLiveBytes += bytes;
  if (route == Route::OsOversize) counters_.osOversize++;
  else if (route == Route::OsMoved) counters_.movedToMappings++;
  else counters_.osFallbacks++;
  TP_PROBE2(os_fallback, bytes, route);
  // A fresh mapping reads as zero; the C heap's memory may hold what it held before.
  return counted(header->data(), bytes, header->serial, route, -1, false, -1, origin == Origin::OsMap);
}

bool Pool::resizeInPlace(const void* data, uint64_t bytes) {
  const Locked lock(*this);
  if (offsetArena_ || recorder_.on()) return false;
  BlockHeader* header = findLocked(data);
  if (!header || header->state != BlockState::Live || header->origin != Origin::Arena) return false;
  if (bytes > header->capacity) {
    if (header->requested < mappedFrom_ && bytes >= mappedFrom_) return false;
    // A span (the process pool's default classes) grows into free memory just after it, where there is some.
    SizeClassPool* generation = header->span ? generationLocked(header->arenaId) : nullptr;
    if (!generation) return false;
    const uint64_t grownBefore = generation->grownBytes();
    if (!generation->growSpan(header, bytes)) return false;
    purgeForGrowthLocked(generation->grownBytes() - grownBefore, bytes - header->requested);
  }
  if (bytes < header->capacity / 2) return false;
  counters_.bytesLive = counters_.bytesLive - header->requested + bytes;
  if (counters_.bytesLive > counters_.peakBytesLive) counters_.peakBytesLive = counters_.bytesLive;
  header->requested = bytes;
  return true;
}

void* Pool::resizeMapped(const void* data, uint64_t bytes) {
  if (bytes == 0 || bytes > kMaxRequest) return nullptr;
  const Locked lock(*this);
  if (options_.arena.lock || recorder_.on() || pins_.load(std::memory_order_acquire) != 0) return nullptr;
  if (offsetArena_ && offsetArena_->contains(data)) return nullptr;
  BlockHeader* header = findLocked(data);
  if (!header || header->state != BlockState::Live || header->origin != Origin::OsMap) return nullptr;
  const uint64_t length = roundUp(kHeaderBytes + bytes, os::pageSize());
  auto* moved = static_cast<BlockHeader*>(os::remapAccounted(header, header->osLength, length));
  if (!moved) return nullptr;
  const uint64_t added = length > moved->osLength ? length - moved->osLength : 0;
  auto node = osLive_.extract(header);  // re-keyed, not erased and inserted: nothing here allocates (or throws)
  node.value() = moved;
  osLive_.insert(std::move(node));
  moved->check = secret_ ^ reinterpret_cast<uintptr_t>(moved);
  moved->capacity = length - kHeaderBytes;
  moved->osLength = length;
  counters_.osLiveBytes = counters_.osLiveBytes - moved->requested + bytes;
  counters_.bytesLive = counters_.bytesLive - moved->requested + bytes;
  if (counters_.bytesLive > counters_.peakBytesLive) counters_.peakBytesLive = counters_.bytesLive;
  moved->requested = bytes;
  purgeForMappingLocked(added);
  return moved->data();
}

void* Pool::allocMoved(uint64_t bytes) {
  if (bytes > kMaxRequest) return nullptr;
  const Locked lock(*this);
  if (bytes < mappedFrom_ || counters_.closed || offsetArena_ || !generations_.back()->schedules().empty()) return nullptr;
  const Allocation a = allocFromOs(bytes, Route::OsMoved);
  if (a.status != AllocStatus::Ok) return nullptr;
  purgeForMappingLocked(bytes);
  cursor_++;
  return a.data;
}

}  // namespace tp

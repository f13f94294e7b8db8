// The pool: the front every allocation goes through. It owns the size-class arenas (one per plan
// generation: the newest serves, older ones drain), the OS fallback, the counters, and the lock that makes
// it safe to use from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "classes.h"
#include "header.h"
#include "size_class_pool.h"

namespace tp {

struct PoolOptions {
  ArenaOptions arena;
  bool grow = false;                                 // carve new blocks from spare reservation on a miss
  uint64_t growReserve = uint64_t{1} << 30;          // spare address space a growing pool may carve
  uint64_t osMapThreshold = uint64_t{256} << 10;     // OS fallbacks at least this large are mmap'd
};

// How a request was served.
enum class Route : uint8_t { Own = 0, Borrowed = 1, Grown = 2, OsFallback = 3, OsOversize = 4 };

enum class AllocStatus : uint8_t { Ok, Closed, BadSize, OutOfMemory };

struct Allocation {
  AllocStatus status = AllocStatus::Ok;
  void* data = nullptr;
  uint64_t serial = 0;
  Route route = Route::Own;
};

enum class ReleaseStatus : uint8_t { Ok, NotOwned, NotLive, Stale };

struct PoolStats {
  uint64_t allocs = 0, releases = 0, finalized = 0;
  uint64_t hits = 0, borrows = 0, grown = 0, osFallbacks = 0, osOversize = 0;
  uint64_t liveBlocks = 0, bytesLive = 0, peakBytesLive = 0;
  uint64_t osLiveBlocks = 0, osLiveBytes = 0;
  uint64_t arenaBytes = 0;      // carved from the arenas (blocks and their headers)
  uint64_t reservedBytes = 0;   // address space the arenas hold
  uint64_t committedBytes = 0;  // pre-faulted / locked by the arenas
  uint64_t arenas = 0;          // arenas alive (the serving one and any still draining)
  uint64_t iterations = 0;      // beginIteration() calls
  uint64_t scheduleHits = 0;    // allocations served where the plan's schedule put them
  uint64_t scheduleMisses = 0;  // scheduled positions whose size differed or whose class had no free block
  bool closed = false;
};

struct ClassStats {
  uint64_t size;
  ClassCounters counters;
};

class Pool {
 public:
  // The largest single request: 2^47 bytes.
  static constexpr uint64_t kMaxRequest = uint64_t{1} << 47;

  static std::shared_ptr<Pool> create(const PlanSpec& plan, const PoolOptions& options, std::string* error);
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // A block of at least `bytes` (1 .. kMaxRequest), 64-byte aligned. When the plan has a schedule and this
  // is the k-th allocation since beginIteration() with the size recorded for position k, the block comes
  // from the class training chose; otherwise (or when that class has no free block): own class, larger
  // classes ascending, then the OS.
  Allocation alloc(uint64_t bytes);
  // An iteration starts: the next allocation is position 0 of the schedule.
  void beginIteration();
  // Returns a live block. NotOwned: `data` is not the start of a block this pool made; NotLive: it was
  // already released. Nothing changes unless the status is Ok.
  ReleaseStatus release(const void* data);
  // The finalizer's release: only when the block is still the live allocation numbered `serial`.
  ReleaseStatus releaseIfSerial(const void* data, uint64_t serial);
  // Bytes the live block at `data` was allocated with, or 0 when it is not a live block of this pool.
  uint64_t liveSize(const void* data);

  // Stops serving. Arenas are unmapped as soon as no block of theirs is outstanding (at once if none is);
  // blocks still live can be released later. Idempotent.
  void close();

  PoolStats stats() const;
  std::vector<ClassStats> classStats() const;  // of the serving arena's classes
  uint64_t interval() const;

 private:
  Pool(const PoolOptions& options, uint64_t secret) : options_(options), secret_(secret) {}
  Allocation allocFromOs(uint64_t bytes, Route route);
  BlockHeader* findLocked(const void* data) const;
  ReleaseStatus releaseLocked(const void* data, uint64_t serial, bool bySerial);
  void returnBlockLocked(BlockHeader* header);
  SizeClassPool* generationLocked(uint32_t id) const;
  void dropDrainedLocked();

  mutable std::mutex mu_;
  PoolOptions options_;
  uint64_t secret_;
  std::vector<std::unique_ptr<SizeClassPool>> generations_;  // back() serves
  std::unordered_set<BlockHeader*> osLive_;
  PoolStats counters_;
  uint64_t nextSerial_ = 1;
  uint64_t cursor_ = 0;  // allocations since beginIteration(): the schedule position of the next one
};

}  // namespace tp

// The replay loop: runs a trace's allocations and frees against an allocator, touching memory as a kernel
// would, and measures time and page faults. No JS runs per event.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "os/faults.h"
#include "core/pool.h"

namespace tp {

// What the replay allocates from.
class ReplayAllocator {
 public:
  virtual ~ReplayAllocator() = default;
  // nullptr when the allocator refuses.
  virtual void* allocate(uint64_t bytes) = 0;
  virtual void release(void* p) = 0;
  // A repetition (or, with iteration marks, an iteration) starts.
  virtual void startIteration() {}
};

// The C library's allocator as loaded in this process: glibc's, or jemalloc / mimalloc / tcmalloc when
// LD_PRELOADed. Blocks are 64-byte aligned (posix_memalign), as tensor frameworks ask for. Where the process
// preloads tensorpool's library, startIteration() marks an iteration of its process pool
// (tensorpool_mark_iteration), as a runtime's hook would: decay then never takes memory a replay reuses every
// iteration, however slow the machine.
class LibcAllocator final : public ReplayAllocator {
 public:
  void* allocate(uint64_t bytes) override;
  void release(void* p) override;
  void startIteration() override;
};

// A tensorpool Pool. startIteration() restarts the plan's schedule.
class PoolAllocator final : public ReplayAllocator {
 public:
  explicit PoolAllocator(std::shared_ptr<Pool> pool) : pool_(std::move(pool)) {}
  void* allocate(uint64_t bytes) override;
  void release(void* p) override;
  void startIteration() override { pool_->markIteration(); }

 private:
  std::shared_ptr<Pool> pool_;
};

// The yardstick, not an allocator: the k-th allocation of a repetition (or iteration) goes to the k-th
// planned offset of a pre-faulted arena, with no bookkeeping and nothing to do on release. A replay through
// it costs the loop and the touching alone: the "ideal pre-planned, pre-faulted arena" the allocators are
// measured against. It refuses an allocation beyond the plan or larger than planned, so it never writes
// outside its arena; with a plan of another trace its blocks may overlap (only the replay's bytes).
class IdealAllocator final : public ReplayAllocator {
 public:
  explicit IdealAllocator(std::unique_ptr<OffsetArena> arena) : arena_(std::move(arena)) {}
  void* allocate(uint64_t bytes) override { return arena_->planned(next_++, bytes); }
  void release(void*) override {}
  void startIteration() override { next_ = 0; }

 private:
  std::unique_ptr<OffsetArena> arena_;
  uint64_t next_ = 0;
};

// How a replay writes the blocks it gets. Verify writes a stamp of its own (8 bytes, or the block's size
// below that) at the start of every page and at the end of the block, and checks them all before the
// release: a block another allocation was handed too, or one written after its release, shows.
enum class Touch : uint8_t { None, Pages, Full, Verify };

struct ReplayTrace {
  const uint8_t* ops;       // per event: 0 alloc, 1 free, 2 iteration mark
  const int32_t* buffers;   // per event: buffer index (-1 for a mark)
  size_t events;
  const double* sizes;      // per buffer
  size_t buffers_count;
};

struct ReplayOptions {
  Touch touch = Touch::Pages;
  bool timeOperations = false;  // time every alloc and release (adds two clock reads per operation)
  // Call startIteration() at every iteration mark and between repetitions (the trace's own boundaries),
  // not only at the start of each repetition.
  bool iterationMarks = false;
  // Never call startIteration(): the replay is one of several threads on a pool that someone else marks.
  bool unmarked = false;
};

struct Repetition {
  uint64_t ns = 0;          // the whole repetition: operations and touching
  uint64_t allocNs = 0;     // inside allocate() (timeOperations only)
  uint64_t releaseNs = 0;   // inside release() (timeOperations only)
  uint64_t allocs = 0, releases = 0;
  uint64_t minorFaults = 0, majorFaults = 0;
  uint64_t corruptions = 0;  // Touch::Verify: blocks whose stamps had changed by their release
};

// A replay that can run a trace in steps, keeping its buffers live between them (an adaptive pool is
// marked between iterations from JS). `slots` holds the live blocks, `next` the next event to run.
struct ReplayCursor {
  std::vector<void*> slots;
  size_t next = 0;
  uint64_t repetitions = 0;  // replayOnce calls so far
};

// Replays the trace once from empty: every buffer still live at the end is released (and counted).
// The cursor must be at its start (next == 0) and is left there. Returns false when the allocator
// refused a block.
bool replayOnce(const ReplayTrace& trace, ReplayAllocator& allocator, const ReplayOptions& options,
                const FaultMeter& meter, ReplayCursor& cursor, Repetition* out);
// Runs events [cursor.next, to) (to <= trace.events) and leaves what they allocated live.
bool replayUntil(const ReplayTrace& trace, ReplayAllocator& allocator, const ReplayOptions& options,
                 const FaultMeter& meter, ReplayCursor& cursor, size_t to, Repetition* out);
// Releases every block the cursor holds and rewinds it to the start.
void replayRewind(const ReplayTrace& trace, ReplayAllocator& allocator, const ReplayOptions& options,
                  const FaultMeter& meter, ReplayCursor& cursor, Repetition* out);

}  // namespace tp

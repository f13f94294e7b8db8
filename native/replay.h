// The replay loop: runs a trace's allocations and frees against an allocator, touching memory as a kernel
// would, and measures time and page faults. No JS runs per event.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "faults.h"
#include "pool.h"

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
// LD_PRELOADed. Blocks are 64-byte aligned (posix_memalign), as tensor frameworks ask for.
class LibcAllocator final : public ReplayAllocator {
 public:
  void* allocate(uint64_t bytes) override;
  void release(void* p) override;
};

// A tensorpool Pool. startIteration() restarts the plan's schedule.
class PoolAllocator final : public ReplayAllocator {
 public:
  explicit PoolAllocator(std::shared_ptr<Pool> pool) : pool_(std::move(pool)) {}
  void* allocate(uint64_t bytes) override;
  void release(void* p) override;
  void startIteration() override { pool_->beginIteration(); }

 private:
  std::shared_ptr<Pool> pool_;
};

enum class Touch : uint8_t { None, Pages, Full };

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
  bool iterationMarks = false;  // call startIteration() at every iteration mark, not only at the start
};

struct Repetition {
  uint64_t ns = 0;          // the whole repetition: operations and touching
  uint64_t allocNs = 0;     // inside allocate() (timeOperations only)
  uint64_t releaseNs = 0;   // inside release() (timeOperations only)
  uint64_t allocs = 0, releases = 0;
  uint64_t minorFaults = 0, majorFaults = 0;
};

// Replays the trace once from empty: every buffer still live at the end is released (and counted).
// `slots` is scratch space reused between repetitions. Returns false when the allocator refused a block.
bool replayOnce(const ReplayTrace& trace, ReplayAllocator& allocator, const ReplayOptions& options,
                const FaultMeter& meter, std::vector<void*>& slots, Repetition* out);

}  // namespace tp

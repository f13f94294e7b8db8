#include "replay.h"

#include <cstdlib>
#include <cstring>

#include "os.h"

namespace tp {

void* LibcAllocator::allocate(uint64_t bytes) {
  void* p = nullptr;
  return posix_memalign(&p, 64, bytes) == 0 ? p : nullptr;
}

void LibcAllocator::release(void* p) { free(p); }

void* PoolAllocator::allocate(uint64_t bytes) {
  Allocation a = pool_->alloc(bytes);
  return a.status == AllocStatus::Ok ? a.data : nullptr;
}

void PoolAllocator::release(void* p) { pool_->release(p); }

namespace {

// Writes the block as a kernel that fills a tensor would: one byte per 4 KiB page, or all of it. The
// writes go through a volatile pointer / a compiler barrier so that no optimiser can drop them.
inline void touch(void* p, uint64_t bytes, Touch how, uint8_t value) {
  if (how == Touch::Pages) {
    volatile uint8_t* b = static_cast<volatile uint8_t*>(p);
    for (uint64_t off = 0; off < bytes; off += 4096) b[off] = value;
  } else if (how == Touch::Full) {
    std::memset(p, value, bytes);
    asm volatile("" : : "r"(p) : "memory");
  }
}

}  // namespace

bool replayOnce(const ReplayTrace& trace, ReplayAllocator& allocator, const ReplayOptions& options,
                const FaultMeter& meter, std::vector<void*>& slots, Repetition* out) {
  slots.assign(trace.buffers_count, nullptr);
  Repetition r;
  const os::FaultCounts faultsBefore = meter.read();
  const uint64_t start = os::monotonicNs();
  bool ok = true;

  allocator.startIteration();
  for (size_t e = 0; e < trace.events && ok; ++e) {
    const uint8_t op = trace.ops[e];
    if (op == 2) {
      if (options.iterationMarks) allocator.startIteration();
      continue;
    }
    const size_t b = static_cast<size_t>(trace.buffers[e]);
    if (op == 0) {
      const uint64_t bytes = static_cast<uint64_t>(trace.sizes[b]);
      uint64_t t0 = options.timeOperations ? os::monotonicNs() : 0;
      void* p = allocator.allocate(bytes);
      if (options.timeOperations) r.allocNs += os::monotonicNs() - t0;
      if (!p) {
        ok = false;
        break;
      }
      touch(p, bytes, options.touch, static_cast<uint8_t>(e));
      slots[b] = p;
      r.allocs++;
    } else {
      uint64_t t0 = options.timeOperations ? os::monotonicNs() : 0;
      allocator.release(slots[b]);
      if (options.timeOperations) r.releaseNs += os::monotonicNs() - t0;
      slots[b] = nullptr;
      r.releases++;
    }
  }
  // Start the next repetition empty: what the trace never freed goes back now.
  for (void*& p : slots) {
    if (!p) continue;
    uint64_t t0 = options.timeOperations ? os::monotonicNs() : 0;
    allocator.release(p);
    if (options.timeOperations) r.releaseNs += os::monotonicNs() - t0;
    p = nullptr;
    r.releases++;
  }
  r.ns = os::monotonicNs() - start;
  const os::FaultCounts faultsAfter = meter.read();
  r.minorFaults = faultsAfter.minor - faultsBefore.minor;
  r.majorFaults = faultsAfter.major - faultsBefore.major;
  *out = r;
  return ok;
}

}  // namespace tp

#include "replay/replay.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>

#include "os/os.h"

namespace tp {

void* LibcAllocator::allocate(uint64_t bytes) {
  void* p = nullptr;
  return posix_memalign(&p, 64, bytes) == 0 ? p : nullptr;
}

void LibcAllocator::release(void* p) { free(p); }

void LibcAllocator::startIteration() {
  using MarkFn = int (*)();
  static const MarkFn mark = reinterpret_cast<MarkFn>(dlsym(RTLD_DEFAULT, "tensorpool_mark_iteration"));
  if (mark) mark();
}

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

// Touch::Verify's stamp for buffer `b` of a repetition: differs between buffers, repetitions and cursors
// (several replays may share a pool).
inline uint64_t stampOf(const ReplayCursor& cursor, size_t b) {
  uint64_t x = (reinterpret_cast<uintptr_t>(&cursor) ^ (cursor.repetitions << 40)) + b * 0x9e3779b97f4a7c15ull;
  x ^= x >> 31;
  return x * 0xbf58476d1ce4e5b9ull;
}

// Where Touch::Verify stamps a block of `bytes`: the start of every page, and its last 8 bytes (a page's
// stamp that would overlap those is left out: two copies written at different offsets would not both hold).
template <typename Visit>
inline void forEachStamp(uint64_t bytes, Visit visit) {
  if (bytes < 8) return visit(0, bytes);
  for (uint64_t off = 0; off + 16 <= bytes; off += 4096) visit(off, 8);
  visit(bytes - 8, 8);
}

inline void stamp(void* p, uint64_t bytes, uint64_t value) {
  forEachStamp(bytes, [&](uint64_t off, uint64_t n) { std::memcpy(static_cast<uint8_t*>(p) + off, &value, n); });
}

inline bool stampIntact(const void* p, uint64_t bytes, uint64_t value) {
  bool intact = true;
  forEachStamp(bytes, [&](uint64_t off, uint64_t n) {
    intact = intact && std::memcmp(static_cast<const uint8_t*>(p) + off, &value, n) == 0;
  });
  return intact;
}

// Gives back the block of buffer `b`, checking its stamps first under Touch::Verify.
void releaseSlot(const ReplayTrace& trace, ReplayAllocator& allocator, const ReplayOptions& options,
                 ReplayCursor& cursor, size_t b, Repetition* r) {
  void*& p = cursor.slots[b];
  if (options.touch == Touch::Verify && !stampIntact(p, static_cast<uint64_t>(trace.sizes[b]), stampOf(cursor, b))) {
    r->corruptions++;
  }
  const uint64_t t0 = options.timeOperations ? os::monotonicNs() : 0;
  allocator.release(p);
  if (options.timeOperations) r->releaseNs += os::monotonicNs() - t0;
  p = nullptr;
  r->releases++;
}

// Runs events [cursor.next, to) into *r (counts and per-operation times; the caller times the whole).
bool runEvents(const ReplayTrace& trace, ReplayAllocator& allocator, const ReplayOptions& options,
               ReplayCursor& cursor, size_t to, Repetition* r) {
  if (cursor.slots.size() != trace.buffers_count) cursor.slots.assign(trace.buffers_count, nullptr);
  std::vector<void*>& slots = cursor.slots;
  for (size_t& e = cursor.next; e < to; ++e) {
    const uint8_t op = trace.ops[e];
    if (op == 2) {
      if (options.iterationMarks && !options.unmarked) allocator.startIteration();
      continue;
    }
    const size_t b = static_cast<size_t>(trace.buffers[e]);
    if (op == 0) {
      const uint64_t bytes = static_cast<uint64_t>(trace.sizes[b]);
      uint64_t t0 = options.timeOperations ? os::monotonicNs() : 0;
      void* p = allocator.allocate(bytes);
      if (options.timeOperations) r->allocNs += os::monotonicNs() - t0;
      if (!p) return false;
      if (options.touch == Touch::Verify) {
        stamp(p, bytes, stampOf(cursor, b));
      } else {
        touch(p, bytes, options.touch, static_cast<uint8_t>(e));
      }
      slots[b] = p;
      r->allocs++;
    } else {
      releaseSlot(trace, allocator, options, cursor, b, r);
    }
  }
  return true;
}

// Releases what the cursor holds, into *r.
void releaseLive(const ReplayTrace& trace, ReplayAllocator& allocator, const ReplayOptions& options, ReplayCursor& cursor,
                 Repetition* r) {
  for (size_t b = 0; b < cursor.slots.size(); ++b) {
    if (cursor.slots[b]) releaseSlot(trace, allocator, options, cursor, b, r);
  }
  cursor.next = 0;
}

// Runs `body` and charges its wall time and page faults to *out.
template <typename Body>
bool measured(const FaultMeter& meter, Repetition* out, Body body) {
  Repetition r;
  const os::FaultCounts faultsBefore = meter.read();
  const uint64_t start = os::monotonicNs();
  const bool ok = body(&r);
  r.ns = os::monotonicNs() - start;
  const os::FaultCounts faultsAfter = meter.read();
  r.minorFaults = faultsAfter.minor - faultsBefore.minor;
  r.majorFaults = faultsAfter.major - faultsBefore.major;
  *out = r;
  return ok;
}

}  // namespace

bool replayOnce(const ReplayTrace& trace, ReplayAllocator& allocator, const ReplayOptions& options,
                const FaultMeter& meter, ReplayCursor& cursor, Repetition* out) {
  return measured(meter, out, [&](Repetition* r) {
    // With the trace's marks, the first iteration of the first repetition is the trace's first: a mark
    // before it would put the run one schedule ahead of the plan trained on the trace.
    if (!options.unmarked && (!options.iterationMarks || cursor.repetitions > 0)) allocator.startIteration();
    cursor.repetitions++;
    const bool ok = runEvents(trace, allocator, options, cursor, trace.events, r);
    // Start the next repetition empty: what the trace never freed (or a refusal left) goes back now.
    releaseLive(trace, allocator, options, cursor, r);
    return ok;
  });
}

bool replayUntil(const ReplayTrace& trace, ReplayAllocator& allocator, const ReplayOptions& options,
                 const FaultMeter& meter, ReplayCursor& cursor, size_t to, Repetition* out) {
  return measured(meter, out, [&](Repetition* r) { return runEvents(trace, allocator, options, cursor, to, r); });
}

void replayRewind(const ReplayTrace& trace, ReplayAllocator& allocator, const ReplayOptions& options,
                  const FaultMeter& meter, ReplayCursor& cursor, Repetition* out) {
  measured(meter, out, [&](Repetition* r) {
    releaseLive(trace, allocator, options, cursor, r);
    return true;
  });
}

}  // namespace tp

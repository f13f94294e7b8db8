// libFuzzer target: the preload library's malloc family, linked into the fuzzer itself so that it is the
// process's allocator (libFuzzer's own allocations go through it too), driven by calls decoded from the
// input against a shadow model:
//   - every pointer is aligned as its API promises and overlaps no other live block;
//   - what was written to a block is intact until it is freed, and realloc keeps the common prefix;
//   - calloc zeroes, even a reused pool block; malloc_usable_size is at least what was asked;
//   - requests at or above the threshold with an alignment of at most 64 come from the pool;
//   - impossible requests fail as the C library's do (NULL and ENOMEM; EINVAL for a bad alignment).
// AddressSanitizer would replace malloc itself, so this target runs with UBSan only; the pool's own code
// is fuzzed under ASan by pool_ops. The script runs it with TENSORPOOL_TEST_MIN_BYTES=4K (the tests' setting).
#include <errno.h>
#include <fuzzer/FuzzedDataProvider.h>
#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <map>

#include "core/header.h"
#include "expect.h"
#include "preload/process_api.h"
#include "preload/process_pool.h"

namespace {

using tpfuzz::fail;

constexpr size_t kChecked = 16 << 10;  // bytes checked at each end of a block
size_t minBytes = 64 << 10;

struct Block {
  size_t size;
  uint8_t value;
};
std::map<uintptr_t, Block> live;
size_t liveBytes = 0;
constexpr size_t kLiveLimit = 256 << 20;  // beyond it the input frees instead of allocating

void paint(uint8_t* p, size_t size, uint8_t value) {
  if (size <= 2 * kChecked) {
    std::memset(p, value, size);
  } else {
    std::memset(p, value, kChecked);
    std::memset(p + size - kChecked, value, kChecked);
  }
}

bool holds(const uint8_t* p, size_t size, uint8_t value) {
  const size_t head = size <= 2 * kChecked ? size : kChecked;
  for (size_t i = 0; i < head; ++i) if (p[i] != value) return false;
  if (size > 2 * kChecked) {
    for (size_t i = size - kChecked; i < size; ++i) if (p[i] != value) return false;
  }
  return true;
}

// A new live block: aligned, apart from every other, usable for its size, pooled when it should be.
void track(void* p, size_t size, size_t alignment, bool poolEligible, uint8_t value, bool zeroed) {
  const auto start = reinterpret_cast<uintptr_t>(p);
  EXPECT(start % alignment == 0, start, alignment);
  const size_t span = size == 0 ? 1 : size;
  auto next = live.lower_bound(start);
  EXPECT(next == live.end() || next->first >= start + span, start, next->first);
  if (next != live.begin()) {
    auto prev = std::prev(next);
    EXPECT(prev->first + (prev->second.size == 0 ? 1 : prev->second.size) <= start, prev->first, start);
  }
  EXPECT(malloc_usable_size(p) >= size, malloc_usable_size(p), size);
  if (poolEligible && size >= minBytes && alignment <= tp::kBlockAlign) {
    EXPECT(tp::preload::ownedByPool(p), start, size);
  }
  if (zeroed) {
    const auto* bytes = static_cast<const uint8_t*>(p);
    EXPECT(holds(bytes, size, 0), start, size);
  }
  paint(static_cast<uint8_t*>(p), size, value);
  live[start] = {size, value};
  liveBytes += size;
}

void release(uintptr_t start) {
  auto it = live.find(start);
  EXPECT(holds(reinterpret_cast<uint8_t*>(start), it->second.size, it->second.value), start, it->second.size);
  liveBytes -= it->second.size;
  live.erase(it);
  free(reinterpret_cast<void*>(start));
}

size_t drawSize(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0: return in.ConsumeIntegralInRange<size_t>(0, 256);
    case 1: return in.ConsumeIntegralInRange<size_t>(minBytes - 64, minBytes + 64);  // both sides of the threshold
    case 2: return in.ConsumeIntegralInRange<size_t>(0, 1 << 20);
    default: return in.ConsumeIntegralInRange<size_t>(0, 8 << 20);
  }
}

uintptr_t pick(FuzzedDataProvider& in) {
  return std::next(live.begin(), static_cast<std::ptrdiff_t>(in.ConsumeIntegral<size_t>() % live.size()))->first;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  minBytes = tensorpool_process_pool()->minBytes;  // the threshold as the library read it
  void* probe = malloc(minBytes);
  if (!tp::preload::ownedByPool(probe)) fail("the process pool is not serving: is the preload code linked in?");
  free(probe);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  uint8_t value = 1;
  while (in.remaining_bytes() > 0) {
    if (++value == 0) value = 1;
    const int op = in.ConsumeIntegralInRange<int>(0, 11);
    if (op >= 8 && live.empty()) continue;
    if (op < 8 && liveBytes > kLiveLimit) {
      release(live.begin()->first);
      continue;
    }
    switch (op) {
      case 0: case 1: {
        const size_t bytes = drawSize(in);
        void* p = malloc(bytes);
        EXPECT(p != nullptr, bytes);
        track(p, bytes, 16, true, value, false);
        break;
      }
      case 2: {
        const size_t count = in.ConsumeIntegralInRange<size_t>(0, 64), bytes = drawSize(in) / 64 + 1;
        void* p = calloc(count, bytes);
        EXPECT(p != nullptr, count, bytes);
        track(p, count * bytes, 16, true, value, true);
        break;
      }
      case 3: {
        const size_t alignment = size_t{8} << in.ConsumeIntegralInRange<int>(0, 10), bytes = drawSize(in);
        void* p = nullptr;
        EXPECT(posix_memalign(&p, alignment, bytes) == 0, alignment, bytes);
        track(p, bytes, alignment, true, value, false);
        break;
      }
      case 4: {
        const size_t alignment = size_t{1} << in.ConsumeIntegralInRange<int>(0, 13), bytes = drawSize(in);
        void* p = in.ConsumeBool() ? aligned_alloc(alignment, bytes) : memalign(alignment, bytes);
        EXPECT(p != nullptr, alignment, bytes);
        track(p, bytes, alignment, true, value, false);
        break;
      }
      case 5: {
        const size_t bytes = drawSize(in);
        const bool page = in.ConsumeBool();
        void* p = page ? valloc(bytes) : pvalloc(bytes);
        EXPECT(p != nullptr, bytes);
        track(p, bytes, 4096, false, value, false);
        break;
      }
      case 6: {  // what no allocator can give: NULL with ENOMEM, or EINVAL for an alignment that is none
        errno = 0;
        EXPECT(malloc(SIZE_MAX - in.ConsumeIntegralInRange<size_t>(0, 4096)) == nullptr && errno == ENOMEM);
        errno = 0;
        EXPECT(calloc(SIZE_MAX / 2, 3) == nullptr && errno == ENOMEM);
        void* p = nullptr;
        EXPECT(posix_memalign(&p, 24, 64) == EINVAL && p == nullptr);
        errno = 0;
        volatile size_t notPowerOfTwo = 48;  // volatile: the compiler would reject the constant
        // The C library's own answer (the library asks it): EINVAL from glibc >= 2.38, a block aligned to the
        // next power of two from older ones (Debian 12's 2.36).
        void* odd = aligned_alloc(notPowerOfTwo, 4096);
        EXPECT((odd == nullptr && errno == EINVAL) || (odd != nullptr && reinterpret_cast<uintptr_t>(odd) % 64 == 0));
        free(odd);
        break;
      }
      case 7: {  // realloc(NULL, n) is malloc(n)
        const size_t bytes = drawSize(in);
        void* p = realloc(nullptr, bytes);
        EXPECT(p != nullptr, bytes);
        track(p, bytes, 16, true, value, false);
        break;
      }
      case 8: case 9:
        release(pick(in));
        break;
      case 10: {  // realloc keeps the common prefix, across the threshold either way
        const uintptr_t start = pick(in);
        const Block old = live[start];
        const size_t bytes = drawSize(in);
        EXPECT(holds(reinterpret_cast<uint8_t*>(start), old.size, old.value), start, old.size);
        live.erase(start);
        liveBytes -= old.size;
        void* p = realloc(reinterpret_cast<void*>(start), bytes);
        if (bytes == 0 && p == nullptr) break;  // freed, as glibc does
        EXPECT(p != nullptr, bytes);
        const size_t kept = std::min({old.size, bytes, kChecked});
        for (size_t i = 0; i < kept; ++i) EXPECT(static_cast<uint8_t*>(p)[i] == old.value, i, bytes);
        track(p, bytes, 16, true, value, false);
        break;
      }
      default: {
        const uintptr_t start = pick(in);
        EXPECT(malloc_usable_size(reinterpret_cast<void*>(start)) >= live[start].size, start);
        break;
      }
    }
  }
  while (!live.empty()) release(live.begin()->first);
  return 0;
}

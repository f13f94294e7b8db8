// libFuzzer target: the pool driven by operation sequences decoded from the input, against a shadow model
// of its own (what the pool promises, not how it keeps it).
//
// The input picks a plan — default classes (growing, as blocks or as spans that may decay), S0 classes or
// time-shared blocks trained from a small trace decoded from the input, or an offsets-mode arena beside S0
// classes — then a sequence of alloc, release, stream release (after a fill queued on the stream), wrong
// releases, reclaim, markIteration, switchPlan, prepareSwitch, recording and liveSize, realloc in place, trim,
// giving span memory back for memory beside the pool, and a front cache's traffic (Pool::applyCached: blocks
// released into the cache, served from it again, given back; log entries naming no block in the right
// state; allocs told what the cache holds). The shadow checks that
//   - every block is 64-byte aligned, inside memory this layer mapped (or, for small OS fallbacks, the C
//     heap, which ASan bounds), and overlaps no block still live, cached, or waiting for its stream;
//   - what was written to a block is intact until it is released (the stream's fills write the same bytes),
//     and after every trim and giving back;
//   - a wrong release (not a block start, released already) is refused and changes nothing;
//   - the counters agree (live blocks and bytes), and closing the pool unmaps all it mapped.
#include <fuzzer/FuzzedDataProvider.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "os/os.h"
#include "planner/strategies.h"
#include "core/pool.h"
#include "stream/stream.h"
#include "train/share.h"
#include "train/train.h"

#include "expect.h"

using namespace tp;

namespace {

using tpfuzz::fail;

// Blocks larger than this are checked at their two ends only (the fuzzer must stay fast).
constexpr uint64_t kCheckedHead = 64 << 10, kCheckedTail = 4 << 10;
constexpr uint64_t kMaxSize = 8 << 20;

void paint(uint8_t* p, uint64_t size, uint8_t value) {
  if (size <= kCheckedHead + kCheckedTail) {
    std::memset(p, value, size);
    return;
  }
  std::memset(p, value, kCheckedHead);
  std::memset(p + size - kCheckedTail, value, kCheckedTail);
}

bool intact(const uint8_t* p, uint64_t size, uint8_t value) {
  auto same = [&](uint64_t from, uint64_t to) {
    for (uint64_t i = from; i < to; ++i) {
      if (p[i] != value) return false;
    }
    return true;
  };
  if (size <= kCheckedHead + kCheckedTail) return same(0, size);
  return same(0, kCheckedHead) && same(size - kCheckedTail, size);
}

struct Live {
  uint64_t size;
  uint8_t value;
  Route route;
  bool cacheable;
  int32_t classIndex;
};
struct Deferred {
  uintptr_t start;
  uint64_t size;
  uint64_t sequence;  // the stream's event: the range may be reused once the stream has passed it
};

struct Trace {
  std::vector<double> sizes, starts, ends;
};

uint64_t drawSize(FuzzedDataProvider& in, const Trace& trace) {
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0:  // a size the plan was trained on
      if (!trace.sizes.empty()) return static_cast<uint64_t>(trace.sizes[in.ConsumeIntegralInRange<size_t>(0, trace.sizes.size() - 1)]);
      [[fallthrough]];
    case 1: return in.ConsumeIntegralInRange<uint64_t>(1, 4096);
    case 2: return in.ConsumeIntegralInRange<uint64_t>(1, 1 << 20);
    default: return in.ConsumeIntegralInRange<uint64_t>(1, kMaxSize);
  }
}

Trace decodeTrace(FuzzedDataProvider& in) {
  Trace t;
  const size_t count = in.ConsumeIntegralInRange<size_t>(1, 24);
  for (size_t i = 0; i < count; ++i) {
    const uint64_t size = in.ConsumeBool() ? in.ConsumeIntegralInRange<uint64_t>(1, 64 << 10)
                                           : in.ConsumeIntegralInRange<uint64_t>(1, 4 << 20);
    t.sizes.push_back(static_cast<double>(size));
    t.starts.push_back(static_cast<double>(i));
    t.ends.push_back(static_cast<double>(i + 1 + in.ConsumeIntegralInRange<size_t>(0, 8)));
  }
  return t;
}

TrainInput inputOf(const Trace& t, uint64_t interval) {
  return TrainInput{t.sizes.data(), t.starts.data(), t.ends.data(), t.sizes.size(), interval, TrainOrder::AllocTime, false};
}

PlanSpec trainedPlan(FuzzedDataProvider& in, const Trace& trace, bool timeShared) {
  const uint64_t interval = uint64_t{1} << in.ConsumeIntegralInRange<int>(6, 16);
  if (timeShared) {
    SharedResult shared = trainTimeShared(inputOf(trace, interval));
    if (shared.ok) return shared.plan;
  }
  return trainSizeClasses(inputOf(trace, interval)).plan;
}

OffsetSchedule offsetsOf(const Trace& trace) {
  planner::Problem problem;
  for (size_t i = 0; i < trace.sizes.size(); ++i) {
    problem.size.push_back((static_cast<uint64_t>(trace.sizes[i]) + 63) / 64 * 64);
    problem.lower.push_back(static_cast<uint64_t>(trace.starts[i]));
    problem.upper.push_back(static_cast<uint64_t>(trace.ends[i]));
  }
  planner::PlanOptions options;
  options.strategy = planner::Strategy::GreedySize;
  const planner::PlanResult result = planner::planOffsets(problem, options);
  OffsetSchedule schedule;
  schedule.height = result.peak;
  for (size_t i = 0; i < trace.sizes.size(); ++i) {
    schedule.sizes.push_back(static_cast<uint64_t>(trace.sizes[i]));
    schedule.offsets.push_back(result.offsets[i]);
  }
  return schedule;
}

const std::shared_ptr<Stream>& sharedStream() {
  static const std::shared_ptr<Stream> s = Stream::create();  // one stream thread for the whole run
  return s;
}
Stream& stream() { return *sharedStream(); }

class Model {
 public:
  explicit Model(Pool& pool) : pool_(pool) {}

  void alloc(uint64_t bytes, uint8_t value, bool tellCache) {
    const int32_t cachedUpTo = tellCache ? cachedUpTo_() : -1;
    const PoolStats before = pool_.stats();
    const Allocation a = pool_.alloc(bytes, cachedUpTo);
    if (a.status == AllocStatus::OutOfMemory) return;  // allowed; nothing else changes
    if (a.status == AllocStatus::WouldMiss) {
      EXPECT(a.classIndex >= 0 && a.classIndex <= cachedUpTo, a.classIndex, cachedUpTo);
      const PoolStats after = pool_.stats();
      EXPECT(after.allocs == before.allocs && after.liveBlocks == before.liveBlocks, after.allocs, before.allocs);
      return;
    }
    EXPECT(a.status == AllocStatus::Ok, static_cast<uint64_t>(a.status));
    const auto start = reinterpret_cast<uintptr_t>(a.data);
    EXPECT(start % 64 == 0, start);
    const bool heap = a.route == Route::OsFallback || a.route == Route::OsOversize;
    if (!heap) {
      EXPECT(os::isTrackedMapping(a.data) && os::isTrackedMapping(static_cast<uint8_t*>(a.data) + bytes - 1), start, bytes);
    }
    forgetPassed();
    for (const auto* held : {&live_, &cached_}) {
      auto next = held->lower_bound(start);
      EXPECT(next == held->end() || next->first >= start + bytes, start, next->first);
      if (next != held->begin()) {
        auto prev = std::prev(next);
        EXPECT(prev->first + prev->second.size <= start, prev->first, start);
      }
    }
    for (const Deferred& d : deferred_) {
      // The pool may have reclaimed it only if the stream passed the event; forgetPassed() ran first, so
      // a range still listed here can be reused only if the stream moved on after that check.
      if (d.start < start + bytes && start < d.start + d.size) EXPECT(stream().passed(d.sequence), d.start, start);
    }
    paint(static_cast<uint8_t*>(a.data), bytes, value);
    live_[start] = {bytes, value, a.route, a.cacheable, a.classIndex};
    bytes_ += bytes;
  }

  // A front cache's log: the owner releases a cacheable block into the cache (it must stay untouched), or
  // the cache serves one again, or gives one back to the pool.
  void cacheRelease(size_t pick) {
    if (live_.empty()) return;
    auto it = std::next(live_.begin(), static_cast<std::ptrdiff_t>(pick % live_.size()));
    if (!it->second.cacheable) return;
    const CachedOp op{reinterpret_cast<void*>(it->first), 0};
    pool_.applyCached(&op, 1);
    EXPECT(pool_.liveSize(op.data) == it->second.size, it->first);  // a cached block still counts as the pool's
    bytes_ -= it->second.size;
    cached_.insert(*it);
    live_.erase(it);
  }

  void cacheServe(size_t pick) {
    if (cached_.empty()) return;
    const auto it = pickCached(pick);
    const CachedOp op{reinterpret_cast<void*>(it->first), it->second.size};
    pool_.applyCached(&op, 1);
    bytes_ += it->second.size;
    live_.insert(*it);
    cached_.erase(it);
  }

  void cacheReturn(size_t pick) {
    if (cached_.empty()) return;
    const auto it = pickCached(pick);
    EXPECT(pool_.returnCached(reinterpret_cast<void*>(it->first)) == ReleaseStatus::Ok, it->first);
    released_.push_back({it->first, it->second.size});
    cached_.erase(it);
  }

  // Log entries that name no block in the right state: ignored, nothing else changes.
  void wrongCacheEntry(size_t pick, uint64_t bytes) {
    const PoolStats before = pool_.stats();
    CachedOp op{nullptr, bytes};
    if (!live_.empty() && pick % 3 == 0) {
      op.data = reinterpret_cast<void*>(std::next(live_.begin(), static_cast<std::ptrdiff_t>(pick % live_.size()))->first);
      op.bytes = std::max<uint64_t>(bytes, 1);  // serving a live block again
    } else if (!cached_.empty() && pick % 3 == 1) {
      auto it = std::next(cached_.begin(), static_cast<std::ptrdiff_t>(pick % cached_.size()));
      op.data = reinterpret_cast<void*>(it->first);
      op.bytes = bytes % 2 ? 0 : Pool::kMaxRequest;  // released twice, or larger than any block
    } else if (!released_.empty()) {
      op.data = reinterpret_cast<void*>(released_[pick % released_.size()].start + (pick % 2) * 64);
      if (live_.count(reinterpret_cast<uintptr_t>(op.data)) || cached_.count(reinterpret_cast<uintptr_t>(op.data))) return;
    }
    pool_.applyCached(&op, 1);
    const PoolStats after = pool_.stats();
    EXPECT(after.cacheRejected == before.cacheRejected + 1, reinterpret_cast<uintptr_t>(op.data), op.bytes);
    EXPECT(after.liveBlocks == before.liveBlocks && after.cachedBlocks == before.cachedBlocks && after.allocs == before.allocs);
    if (op.data && !cached_.count(reinterpret_cast<uintptr_t>(op.data))) {
      EXPECT(pool_.returnCached(op.data) != ReleaseStatus::Ok, reinterpret_cast<uintptr_t>(op.data));
    }
  }

  void release(size_t pick, bool withStream) {
    if (live_.empty()) return;
    auto it = std::next(live_.begin(), static_cast<std::ptrdiff_t>(pick % live_.size()));
    auto* p = reinterpret_cast<uint8_t*>(it->first);
    EXPECT(intact(p, it->second.size, it->second.value), it->first, it->second.size);
    EXPECT(pool_.liveSize(p) == it->second.size, it->first, it->second.size);
    if (withStream) {
      Task fill;  // the stream writes what the block already holds, after the release has been recorded
      fill.kind = Task::Kind::Fill;
      fill.dst = p;
      fill.bytes = std::min<uint64_t>(it->second.size, 1 << 20);
      fill.pattern = it->second.value;
      fill.keep = pool_.pin();
      stream().enqueue(std::move(fill));
      EXPECT(pool_.releaseAfter(p, sharedStream()) == ReleaseStatus::Ok);
      deferred_.push_back({it->first, it->second.size, stream().recorded()});
    } else {
      EXPECT(pool_.release(p) == ReleaseStatus::Ok, it->first);
    }
    released_.push_back({it->first, it->second.size});
    bytes_ -= it->second.size;
    live_.erase(it);
  }

  // An amount of memory to give back near what a release freed (so that whole free spans go and a little is
  // left to split off the next), or 0 where nothing was released.
  uint64_t nearReleased(size_t pick, uint64_t more) const {
    return released_.empty() ? 0 : released_[pick % released_.size()].size + more;
  }

  // realloc in place: the block keeps what it held (up to the smaller size) and, grown into the free memory
  // after it, overlaps no other block.
  void resize(size_t pick, uint64_t bytes) {
    if (live_.empty()) return;
    auto it = std::next(live_.begin(), static_cast<std::ptrdiff_t>(pick % live_.size()));
    auto* p = reinterpret_cast<uint8_t*>(it->first);
    const uint64_t old = it->second.size;
    if (!pool_.resizeInPlace(p, bytes)) {
      EXPECT(pool_.liveSize(p) == old, it->first, old);
      return;
    }
    EXPECT(pool_.liveSize(p) == bytes, it->first, bytes);
    // All of the smaller size where paint() wrote all of the old one, else its checked head.
    const uint64_t kept = old <= kCheckedHead + kCheckedTail || bytes >= old ? std::min(old, bytes) : std::min(bytes, kCheckedHead);
    EXPECT(intact(p, kept, it->second.value), it->first, kept);
    for (const auto* held : {&live_, &cached_}) {
      const auto next = held->upper_bound(it->first);
      EXPECT(next == held->end() || next->first >= it->first + bytes, it->first, bytes);
    }
    paint(p, bytes, it->second.value);
    bytes_ = bytes_ - old + bytes;
    it->second.size = bytes;
  }

  // What every live or cached block holds, checked now (a pool giving memory back must touch none of it).
  void checkHeld() {
    for (const auto* held : {&live_, &cached_}) {
      for (const auto& [start, block] : *held) EXPECT(intact(reinterpret_cast<uint8_t*>(start), block.size, block.value), start, block.size);
    }
  }

  // Releases the pool must refuse: inside a live block, or a start that is no longer live.
  void wrongRelease(size_t pick) {
    const PoolStats before = pool_.stats();
    uintptr_t target = 0;
    if (!live_.empty() && pick % 2 == 0) {
      auto it = std::next(live_.begin(), static_cast<std::ptrdiff_t>(pick % live_.size()));
      if (it->second.size <= 64) return;
      target = it->first + 64 * (1 + pick % ((it->second.size - 1) / 64));
    } else if (!released_.empty()) {
      target = released_[pick % released_.size()].start;
      if (live_.count(target)) return;  // handed out again: a fair release
    } else {
      return;
    }
    const ReleaseStatus status = pool_.release(reinterpret_cast<void*>(target));
    EXPECT(status != ReleaseStatus::Ok, target);
    const PoolStats after = pool_.stats();
    EXPECT(after.liveBlocks == before.liveBlocks && after.releases == before.releases, target);
  }

  void checkCounters() {
    const PoolStats s = pool_.stats();
    EXPECT(s.liveBlocks == live_.size(), s.liveBlocks, live_.size());
    EXPECT(s.bytesLive == bytes_, s.bytesLive, bytes_);
    EXPECT(s.cachedBlocks == cached_.size(), s.cachedBlocks, cached_.size());
  }

  void releaseAll() {
    while (!cached_.empty()) cacheReturn(0);
    while (!live_.empty()) release(0, false);
  }

 private:
  void forgetPassed() {
    std::erase_if(deferred_, [](const Deferred& d) { return stream().passed(d.sequence); });
  }

  // A cached block, its contents checked: nobody may have been handed it while the cache held it.
  std::map<uintptr_t, Live>::iterator pickCached(size_t pick) {
    auto it = std::next(cached_.begin(), static_cast<std::ptrdiff_t>(pick % cached_.size()));
    EXPECT(intact(reinterpret_cast<uint8_t*>(it->first), it->second.size, it->second.value), it->first);
    return it;
  }

  int32_t cachedUpTo_() const {
    int32_t most = -1;
    for (const auto& [start, block] : cached_) most = std::max(most, block.classIndex);
    return most;
  }

  Pool& pool_;
  std::map<uintptr_t, Live> live_;
  std::map<uintptr_t, Live> cached_;  // released into the front cache: the pool must not hand them out
  std::vector<Deferred> deferred_;
  struct Released {
    uintptr_t start;
    uint64_t size;
  };
  std::vector<Released> released_;  // blocks released or returned from the cache, in that order
  uint64_t bytes_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Every block must lie in memory this layer mapped: track its mappings from the start.
  if (!os::trackMappings()) fail("trackMappings");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const uint64_t mappedBefore = os::mappedBytes();
  const Trace trace = decodeTrace(in);
  // 0: the default classes; 1, 2: a plan trained from the trace (S0 classes, time-shared blocks); 3: an offsets
  // arena beside S0 classes; 4: the default classes as spans (the process pool's), decaying or not.
  const int kind = in.ConsumeIntegralInRange<int>(0, 4);
  PlanSpec plan = kind == 0 || kind == 4 ? defaultPlan() : trainedPlan(in, trace, kind == 2);
  PoolOptions options;
  options.arena.prefault = in.ConsumeBool();
  options.growth = kind == 0 ? Growth::BeforeBorrowing : kind == 4 ? Growth::Spans : (in.ConsumeBool() ? Growth::AfterBorrowing : Growth::Off);
  if (kind == 4 && in.ConsumeBool()) options.decayMs = in.ConsumeIntegralInRange<uint64_t>(0, 5);
  options.growReserve = 64 << 20;
  const OffsetSchedule offsets = kind == 3 ? offsetsOf(trace) : OffsetSchedule{};
  std::string error;
  std::shared_ptr<Pool> pool = Pool::create(plan, options, &error, kind == 3 ? &offsets : nullptr);
  if (!pool) fail(error.c_str());
  {
    Model model(*pool);
    uint8_t value = 1;
    while (in.remaining_bytes() > 0) {
      switch (in.ConsumeIntegralInRange<int>(0, 18)) {
        case 0: case 1: case 2: model.alloc(drawSize(in, trace), value++, in.ConsumeBool()); break;
        case 12: model.cacheRelease(in.ConsumeIntegral<size_t>()); break;
        case 13: model.cacheServe(in.ConsumeIntegral<size_t>()); break;
        case 14: model.cacheReturn(in.ConsumeIntegral<size_t>()); break;
        case 15: model.wrongCacheEntry(in.ConsumeIntegral<size_t>(), drawSize(in, trace)); break;
        case 3: case 4: model.release(in.ConsumeIntegral<size_t>(), false); break;
        case 5: model.release(in.ConsumeIntegral<size_t>(), true); break;
        case 6: model.wrongRelease(in.ConsumeIntegral<size_t>()); break;
        case 16: model.resize(in.ConsumeIntegral<size_t>(), drawSize(in, trace)); break;
        case 17: pool->trim(); model.checkHeld(); break;
        // Memory beside the pool grew (the preload library's C heap): that much free span memory goes back.
        case 18: {
          const uint64_t near = model.nearReleased(in.ConsumeIntegral<size_t>(), in.ConsumeIntegralInRange<uint64_t>(0, 8192));
          pool->tryPurgeSpansFor(near && in.ConsumeBool() ? near : in.ConsumeIntegralInRange<uint64_t>(1, 16 << 20));
          model.checkHeld();
          break;
        }
        case 7: pool->reclaim(); break;
        case 8: pool->markIteration(); break;
        case 9: {
          const Trace other = decodeTrace(in);
          const PlanSpec next = in.ConsumeBool() ? trainedPlan(in, other, in.ConsumeBool()) : defaultPlan();
          const bool twoSteps = in.ConsumeBool();
          if (twoSteps ? pool->prepareSwitch(next, &error) == 0 : !pool->switchPlan(next, &error)) fail(error.c_str());
          if (twoSteps && in.ConsumeBool()) pool->markIteration();
          break;
        }
        case 10:
          if (pool->recordingState().on) {
            pool->copyRecording(pool->recordingState().begin);
            pool->stopRecording();
          } else {
            pool->startRecording(in.ConsumeIntegralInRange<uint64_t>(1, 64));
          }
          break;
        default:
          if (in.ConsumeBool()) stream().waitFor(stream().recorded());
          model.checkCounters();
          break;
      }
      if (value == 0) value = 1;
    }
    model.checkCounters();
    model.releaseAll();
  }
  stream().waitFor(stream().recorded());
  pool->reclaim();
  const PoolStats end = pool->stats();
  EXPECT(end.liveBlocks == 0 && end.bytesLive == 0, end.liveBlocks, end.bytesLive);
  pool->close();
  pool.reset();
  // The stream drops its last task's pin just after reporting it done: give it a moment.
  for (int i = 0; i < 2000 && os::mappedBytes() != mappedBefore; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT(os::mappedBytes() == mappedBefore, os::mappedBytes(), mappedBefore);
  return 0;
}

// Soak of the native core (issue 14): one Pool, `threads` threads allocating and releasing blocks of sizes
// drawn from real traces, a quarter of the releases stream-ordered (a fill of the block's stamp queued on one
// of two streams first, so the stream writes into the block after its release), and every `replan`
// operations a re-plan as adaptive mode makes one: record a window, train S0 classes from it, prepare the
// switch off the allocating threads and install it at a mark, give the retired arena's free pages back.
// Every block carries a stamp (its first and last 64 bytes and one word every 64 KiB, all derived from the
// block's number) written at allocation and checked at release; a mismatch is a corruption. RSS is sampled
// every second from /proc/self/statm, next to what the pool holds (its arenas' committed bytes and its live
// OS blocks), so that memory the pool does not account for shows apart from the arena each plan needs.
//
//   tp_soak <sizes-file> [operations=1e8] [threads=4] [replan-every=1e7]
// The sizes file holds one size in bytes per line (bench/soak.ts writes it from traces). Prints one JSON
// object: operations, seconds, corruptions, re-plans, pool counters and the RSS samples (MiB).
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "os/os.h"
#include "core/pool.h"
#include "stream/stream.h"
#include "train/train.h"

using namespace tp;

namespace {

constexpr uint64_t kEdge = 64, kStride = 64 << 10;
constexpr size_t kSlots = 16;  // blocks each thread keeps live

uint64_t stampOf(uint64_t id, uint64_t at) { return (id * 0x9E3779B97F4A7C15ull) ^ (at * 0xBF58476D1CE4E5B9ull) ^ 0x5A5A; }

// The stamp's words: at 0 and `bytes - 8` (edge words), and at every kStride in between.
template <typename Fn>
void forEachStampWord(uint64_t bytes, Fn&& fn) {
  if (bytes < 8) return;
  for (uint64_t at = 0; at + 8 <= std::min(bytes, kEdge); at += 8) fn(at);
  for (uint64_t at = kStride; at + 8 <= bytes; at += kStride) fn(at);
  if (bytes > kEdge) {
    for (uint64_t at = bytes - std::min(bytes - kEdge, kEdge); at + 8 <= bytes; at += 8) fn(at / 8 * 8);
  }
}

void writeStamp(void* p, uint64_t bytes, uint64_t id) {
  auto* base = static_cast<uint8_t*>(p);
  forEachStampWord(bytes, [&](uint64_t at) {
    const uint64_t word = stampOf(id, at);
    std::memcpy(base + at, &word, 8);
  });
}

bool stampHolds(const void* p, uint64_t bytes, uint64_t id) {
  const auto* base = static_cast<const uint8_t*>(p);
  bool ok = true;
  forEachStampWord(bytes, [&](uint64_t at) {
    uint64_t word;
    std::memcpy(&word, base + at, 8);
    ok = ok && word == stampOf(id, at);
  });
  return ok;
}

struct Shared {
  std::shared_ptr<Pool> pool;
  std::shared_ptr<Stream> streams[2];
  std::vector<uint64_t> sizes;
  std::atomic<uint64_t> operations{0}, corruptions{0}, failures{0}, nextId{1};
  uint64_t target = 0;
};

void allocator(Shared& s, unsigned index) {
  uint64_t rng = 0x9E3779B97F4A7C15ull * (index + 1);
  auto next = [&] {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
  };
  struct Slot {
    void* data = nullptr;
    uint64_t bytes = 0, id = 0;
  } slots[kSlots];
  uint64_t done = 0;
  auto release = [&](Slot& slot) {
    if (!stampHolds(slot.data, slot.bytes, slot.id)) s.corruptions.fetch_add(1);
    if (next() % 4 == 0) {
      const std::shared_ptr<Stream>& stream = s.streams[next() % 2];
      Task fill;  // rewrites the first word of the stamp after the release: the block must not be reused before
      fill.kind = Task::Kind::Fill;
      fill.dst = slot.data;
      fill.bytes = std::min<uint64_t>(slot.bytes, 8);
      const uint64_t word = stampOf(slot.id, 0);
      std::memcpy(&fill.pattern, &word, 8);
      fill.patternBytes = 8;
      fill.keep = s.pool->pin();
      stream->enqueue(std::move(fill));
      if (s.pool->releaseAfter(slot.data, stream) != ReleaseStatus::Ok) s.failures.fetch_add(1);
    } else if (s.pool->release(slot.data) != ReleaseStatus::Ok) {
      s.failures.fetch_add(1);
    }
    slot.data = nullptr;
  };
  while (s.operations.load(std::memory_order_relaxed) < s.target) {
    Slot& slot = slots[next() % kSlots];
    if (slot.data) {
      release(slot);
    } else {
      const uint64_t bytes = s.sizes[next() % s.sizes.size()];
      const Allocation a = s.pool->alloc(bytes);
      if (a.status != AllocStatus::Ok) {
        s.failures.fetch_add(1);
      } else {
        slot = {a.data, bytes, s.nextId.fetch_add(1, std::memory_order_relaxed)};
        writeStamp(slot.data, slot.bytes, slot.id);
      }
    }
    if (++done % 1024 == 0) s.operations.fetch_add(1024, std::memory_order_relaxed);
  }
  for (Slot& slot : slots) {
    if (slot.data) release(slot);
  }
}

// Record a window of events, train S0 classes from it (lifetimes in event numbers; buffers still live at
// the window's end live to its end), prepare the switch and install it at a mark.
bool replan(Shared& s, std::string* error) {
  Pool& pool = *s.pool;
  const uint64_t from = pool.recordingState().end;
  pool.startRecording(400000);
  while (pool.recordingState().on && pool.recordingState().end - from < 200000 && s.operations.load() < s.target) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  pool.stopRecording();
  const std::vector<RecordedEvent> events = pool.copyRecording(from);
  pool.discardRecording(pool.recordingState().end);
  std::unordered_map<uint64_t, size_t> open;
  std::vector<double> sizes, starts, ends;
  for (size_t i = 0; i < events.size(); ++i) {
    const RecordedEvent& e = events[i];
    if (e.op() == RecordedOp::Alloc) {
      open[e.serial] = sizes.size();
      sizes.push_back(static_cast<double>(e.bytes()));
      starts.push_back(static_cast<double>(i));
      ends.push_back(static_cast<double>(events.size()));
    } else if (e.op() == RecordedOp::Release) {
      auto it = open.find(e.serial);
      if (it != open.end()) ends[it->second] = static_cast<double>(i) + 0.5;
    }
  }
  if (sizes.empty()) return true;
  TrainResult trained = trainSizeClasses({sizes.data(), starts.data(), ends.data(), sizes.size(), 4096, TrainOrder::AllocTime, false});
  trained.plan.schedule.clear();  // threads interleave differently every window: classes only
  if (pool.prepareSwitch(trained.plan, error) == 0) return false;
  pool.markIteration();
  pool.discardRetired();
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: tp_soak <sizes-file> [operations=1e8] [threads=4] [replan-every=1e7]\n");
    return 2;
  }
  Shared s;
  std::ifstream in(argv[1]);
  for (uint64_t size; in >> size;) {
    if (size > 0 && size <= Pool::kMaxRequest) s.sizes.push_back(size);
  }
  if (s.sizes.empty()) {
    std::fprintf(stderr, "tp_soak: %s holds no sizes\n", argv[1]);
    return 2;
  }
  s.target = argc > 2 ? static_cast<uint64_t>(std::strtod(argv[2], nullptr)) : 100000000;
  const unsigned threads = argc > 3 ? static_cast<unsigned>(std::atoi(argv[3])) : 4;
  const uint64_t replanEvery = argc > 4 ? static_cast<uint64_t>(std::strtod(argv[4], nullptr)) : 10000000;
  if (s.target == 0 || threads == 0 || threads > 64 || replanEvery == 0) {
    std::fprintf(stderr, "tp_soak: operations, threads (1..64) and replan-every must be positive\n");
    return 2;
  }

  PoolOptions options;
  options.growth = Growth::BeforeBorrowing;
  options.growReserve = uint64_t{16} << 30;
  std::string error;
  s.pool = Pool::create(defaultPlan(), options, &error);
  if (!s.pool) {
    std::fprintf(stderr, "tp_soak: %s\n", error.c_str());
    return 1;
  }
  s.streams[0] = Stream::create();
  s.streams[1] = Stream::create();

  const auto started = std::chrono::steady_clock::now();
  std::vector<std::thread> workers;
  for (unsigned i = 0; i < threads; ++i) workers.emplace_back(allocator, std::ref(s), i);

  std::vector<double> rssMiB, poolMiB;  // the process's RSS, and what the pool holds (arenas' committed pages and OS blocks)
  uint64_t replans = 0, replanFailures = 0, nextReplan = replanEvery;
  auto lastSample = started;
  while (s.operations.load() < s.target) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const auto now = std::chrono::steady_clock::now();
    if (now - lastSample >= std::chrono::seconds(1)) {
      rssMiB.push_back(static_cast<double>(os::residentBytes()) / (1 << 20));
      const PoolStats held = s.pool->stats();
      poolMiB.push_back(static_cast<double>(held.committedBytes + held.osLiveBytes) / (1 << 20));
      lastSample = now;
    }
    if (s.operations.load() >= nextReplan) {
      if (replan(s, &error)) ++replans;
      else ++replanFailures;
      nextReplan += replanEvery;
    }
  }
  for (std::thread& t : workers) t.join();
  for (auto& stream : s.streams) stream->close(false);
  s.pool->reclaim();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const PoolStats st = s.pool->stats();

  std::printf("{\"operations\":%" PRIu64 ",\"seconds\":%.3f,\"threads\":%u,\"corruptions\":%" PRIu64 ",\"failures\":%" PRIu64
              ",\"replans\":%" PRIu64 ",\"replanFailures\":%" PRIu64 ",\"allocs\":%" PRIu64 ",\"osFallbacks\":%" PRIu64
              ",\"liveBlocksAtEnd\":%" PRIu64 ",\"deferredAtEnd\":%" PRIu64 ",\"switches\":%" PRIu64 ",\"peakLiveMiB\":%.1f,\"rssMiB\":[",
              s.operations.load(), seconds, threads, s.corruptions.load(), s.failures.load(), replans, replanFailures, st.allocs,
              st.osFallbacks + st.osOversize, st.liveBlocks, st.deferredPending, st.switches,
              static_cast<double>(st.peakBytesLive) / (1 << 20));
  for (size_t i = 0; i < rssMiB.size(); ++i) std::printf("%s%.1f", i ? "," : "", rssMiB[i]);
  std::printf("],\"poolMiB\":[");
  for (size_t i = 0; i < poolMiB.size(); ++i) std::printf("%s%.1f", i ? "," : "", poolMiB[i]);
  std::printf("]}\n");
  s.pool->close();
  return s.corruptions.load() == 0 && s.failures.load() == 0 ? 0 : 1;
}

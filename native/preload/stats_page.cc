#include "stats_page.h"

#include <errno.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstring>
#include <new>

#include "always_run.h"
#include "core/pool_gauges.h"
#include "os/os.h"
#include "os/shared_page.h"
#include "process_pool.h"
#include "this_process.h"

#ifndef TP_PACKAGE_VERSION
#define TP_PACKAGE_VERSION "unknown"
#endif

namespace tp::preload {

namespace {

constexpr char kName[] = "tensorpool-stats";  // /memfd:tensorpool-stats in /proc/PID/maps
constexpr size_t kPageBytes = 8192;

struct StatsPageHeader {
  char magic[8];             // "TPSTATS\0"
  uint32_t version;          // kStatsPageVersion
  uint32_t pageBytes;        // kPageBytes
  uint32_t directoryOffset;  // the directory: fieldCount DirectoryEntry
  uint32_t fieldCount;
  uint32_t countersOffset;   // the PoolStats the pool counts in
  uint32_t gaugesOffset;     // the GaugesBlock
  uint32_t gaugesBytes;
  uint32_t bucketsOffset;    // the SizeBucket table in the page, bucketCount of bucketBytes (7 uint64 each:
  uint32_t bucketCount;      // liveBlocks, liveBytes, osBlocks, osBytes, freeBlocks, idleBytes, givenBackBytes;
  uint32_t bucketBytes;      // bucket k: capacities in [2^k, 2^(k+1)))
  uint32_t rangesOffset;     // the arenas' carved ranges (PoolGauges::ranges: {start, bytes} uint64 pairs),
  uint32_t rangeCountOffset; // and the uint64 that says how many of them hold one
  uint32_t rangeMax;
  uint32_t bySizeRequests;   // a reader adds one to ask for the table by size (writing through /proc/PID/mem)
  int64_t pid;               // the process counting here (a fork's child puts its own)
  uint64_t minBytes;         // TENSORPOOL_MIN_BYTES
  uint64_t decayMs;          // UINT64_MAX: decay off
  char mode[16];             // "default", "planned", "recording", "adaptive"
  char packageVersion[32];   // the package version the library was built from
  char planPath[1024];       // "" where none
  char recordPath[1024];
};

struct DirectoryEntry {
  char name[24];
  uint32_t offset;  // of the uint64 in the page
  uint32_t kind;    // 0: a counter, live; 1: a gauge, in the gauges block
};

struct GaugesBlock {
  uint64_t published;    // publication number: written last, read first
  uint64_t publishedNs;  // CLOCK_MONOTONIC (coarse) when published; 0 before the first
  uint64_t publishedOps; // allocs + releases then: how far the counters have moved on since
  uint64_t publishedMoves;  // movesOf() then
  uint64_t bySizeNs;     // when the table by size was last worked out (CLOCK_MONOTONIC); 0: never
  uint64_t bySizeAsked;  // the bySizeRequests count the table answered
  PoolGauges gauges;
  SizeBuckets bySize;
  uint64_t publishing;   // publication number: written first, read last
};

// The counters the page names: those the pool keeps live (the arenas' bytes it adds in stats() are gauges).
// Named as processPool().stats() names them.
#define TP_PAGE_COUNTERS(X)                                                                                          \
  X(allocs) X(releases) X(finalized) X(hits) X(borrows) X(grown) X(osFallbacks) X(osOversize) X(liveBlocks)          \
  X(bytesLive) X(peakBytesLive) X(osLiveBlocks) X(osLiveBytes) X(unplannedBorrows) X(iterations) X(generation)       \
  X(switches) X(scheduleHits) X(scheduleMisses) X(offsetHits) X(offsetMisses) X(deferredPending) X(deferredBytes)    \
  X(cachedBlocks) X(cachedBytes) X(purgedBlocks) X(purgedBytes) X(rewarmedBytes) X(movedToMappings)
#define TP_PAGE_GAUGES(X) X(arenaBytes) X(reservedBytes) X(committedBytes) X(arenas) X(preparedGeneration) X(idleBytes)
#define TP_COUNT(name) +1
constexpr uint32_t kFieldCount = 0 TP_PAGE_COUNTERS(TP_COUNT) TP_PAGE_GAUGES(TP_COUNT);
#undef TP_COUNT
// A tripwire: a field added to PoolStats is not in the page until it is named above (or left out on purpose).
static_assert(sizeof(PoolStats) == 38 * 8, "PoolStats changed: name its new counters in TP_PAGE_COUNTERS, then update this size");

constexpr uint32_t kDirectoryOffset = sizeof(StatsPageHeader);
constexpr uint32_t kCountersOffset = (kDirectoryOffset + kFieldCount * sizeof(DirectoryEntry) + 63) / 64 * 64;
constexpr uint32_t kGaugesOffset = (kCountersOffset + sizeof(PoolStats) + 63) / 64 * 64;
static_assert(kGaugesOffset + sizeof(GaugesBlock) <= kPageBytes, "the stats page holds its header, directory, counters and gauges");
// Where readers look (lib/process/live-stats.ts reads these offsets as written here).
static_assert(offsetof(StatsPageHeader, version) == 8 && offsetof(StatsPageHeader, rangeMax) == 56 && offsetof(StatsPageHeader, bySizeRequests) == 60 && offsetof(StatsPageHeader, pid) == 64 &&
              offsetof(StatsPageHeader, minBytes) == 72 && offsetof(StatsPageHeader, decayMs) == 80 && offsetof(StatsPageHeader, mode) == 88 &&
              offsetof(StatsPageHeader, packageVersion) == 104 && offsetof(StatsPageHeader, planPath) == 136 &&
              offsetof(StatsPageHeader, recordPath) == 1160 && sizeof(DirectoryEntry) == 32);
static_assert(offsetof(GaugesBlock, publishedNs) == 8 && offsetof(GaugesBlock, publishedOps) == 16 && offsetof(GaugesBlock, bySizeNs) == 32 &&
              offsetof(GaugesBlock, bySizeAsked) == 40 && offsetof(GaugesBlock, publishing) == sizeof(GaugesBlock) - 8);
static_assert(sizeof(SizeBucket) == 7 * 8 && sizeof(PoolGauges::Range) == 16);

os::SharedPage page;  // start == nullptr: none
// Held while the page is written (never while waiting for anything: the fork's prepare handler waits for it
// with the pool's lock held).
std::atomic<bool> publishing{false};
std::atomic<uint64_t> lastPublishedNs{0};
std::atomic<uint64_t> bySizeAnswered{0};  // the bySizeRequests count the last table answered
// fork(): the page as the parent left it for its child (statsPageBeforeFork), and whether it is this fork's.
alignas(64) unsigned char forkCopy[kPageBytes];
bool forkCopied = false;

StatsPageHeader& header() { return *static_cast<StatsPageHeader*>(page.start); }
// How many times readers asked for the table by size (they write the count from another process).
uint64_t bySizeRequested() { return __atomic_load_n(&header().bySizeRequests, __ATOMIC_RELAXED); }
const PoolStats& counters() { return *reinterpret_cast<const PoolStats*>(static_cast<char*>(page.start) + kCountersOffset); }
// What changes with every change of the gauges: allocations, releases, purges, switches.
uint64_t movesOf(const PoolStats& c) { return c.allocs + c.releases + c.purgedBlocks + c.switches; }
GaugesBlock& block() { return *reinterpret_cast<GaugesBlock*>(static_cast<char*>(page.start) + kGaugesOffset); }

void copyText(char* to, size_t capacity, const char* text) {
  if (!text) return;
  const size_t n = strnlen(text, capacity - 1);
  memcpy(to, text, n);
  to[n] = '\0';
}

void writeDirectory() {
  auto* entry = reinterpret_cast<DirectoryEntry*>(static_cast<char*>(page.start) + kDirectoryOffset);
  const auto add = [&entry](const char* name, size_t offset, uint32_t kind) {
    copyText(entry->name, sizeof entry->name, name);
    entry->offset = static_cast<uint32_t>(offset);
    entry->kind = kind;
    ++entry;
  };
#define TP_COUNTER(name) add(#name, kCountersOffset + offsetof(PoolStats, name), 0);
#define TP_GAUGE(name) add(#name, kGaugesOffset + offsetof(GaugesBlock, gauges) + offsetof(PoolGauges, name), 1);
  TP_PAGE_COUNTERS(TP_COUNTER)
  TP_PAGE_GAUGES(TP_GAUGE)
#undef TP_COUNTER
#undef TP_GAUGE
}

// Publication `n` of the gauges (and of the table, where `bySize`), between its two numbers.
void writeGauges(const PoolGauges& gauges, const SizeBuckets* bySize, uint64_t nowNs, uint64_t asked) {
  GaugesBlock& b = block();
  const uint64_t n = b.published + 1;
  __atomic_store_n(&b.publishing, n, __ATOMIC_RELAXED);
  std::atomic_thread_fence(std::memory_order_release);
  b.publishedNs = nowNs;
  b.publishedOps = counters().allocs + counters().releases;
  b.publishedMoves = movesOf(counters());
  b.gauges = gauges;
  if (bySize) {
    b.bySize = *bySize;
    b.bySizeNs = nowNs;
    b.bySizeAsked = asked;
  }
  std::atomic_thread_fence(std::memory_order_release);
  __atomic_store_n(&b.published, n, __ATOMIC_RELAXED);
}

}  // namespace

PoolStats* makeStatsPage(uint64_t decayMs) {
  const ProcessSettings* settings = processSettings();
  if (page.start || !settings) return nullptr;  // one pool a process
  const int saved = errno;
  if (!os::makeSharedPage(kName, kPageBytes, &page)) {
    page = {};
    errno = saved;
    return nullptr;
  }
  StatsPageHeader& h = header();
  memcpy(h.magic, "TPSTATS", 8);
  h.version = kStatsPageVersion;
  h.pageBytes = kPageBytes;
  h.directoryOffset = kDirectoryOffset;
  h.fieldCount = kFieldCount;
  h.countersOffset = kCountersOffset;
  h.gaugesOffset = kGaugesOffset;
  h.gaugesBytes = sizeof(GaugesBlock);
  h.bucketsOffset = kGaugesOffset + offsetof(GaugesBlock, bySize);
  h.bucketCount = SizeBuckets::kCount;
  h.bucketBytes = sizeof(SizeBucket);
  h.rangesOffset = kGaugesOffset + offsetof(GaugesBlock, gauges) + offsetof(PoolGauges, ranges);
  h.rangeCountOffset = kGaugesOffset + offsetof(GaugesBlock, gauges) + offsetof(PoolGauges, rangeCount);
  h.rangeMax = PoolGauges::kRanges;
  h.pid = getpid();
  h.minBytes = settings->minBytes;
  h.decayMs = decayMs;
  copyText(h.mode, sizeof h.mode, settings->mode);
  copyText(h.packageVersion, sizeof h.packageVersion, TP_PACKAGE_VERSION);
  copyText(h.planPath, sizeof h.planPath, settings->planPath.c_str());
  copyText(h.recordPath, sizeof h.recordPath, settings->record ? settings->recordPath : nullptr);
  writeDirectory();
  bySizeAnswered.store(0, std::memory_order_relaxed);
  errno = saved;
  return new (static_cast<char*>(page.start) + kCountersOffset) PoolStats{};
}

void dropStatsPage() {
  if (!page.start) return;
  os::dropSharedPage(&page);
}

void publishStats(Pool& pool, Publish when) {
  if (!page.start) return;
  const uint64_t now = os::coarseMonotonicNs();
  if (when == Publish::IfDue && now - lastPublishedNs.load(std::memory_order_relaxed) < kPublishEveryNs) return;
  InternalScope inside;
  const int saved = errno;
  const uint64_t asked = bySizeRequested();
  if (when == Publish::IfChanged && movesOf(counters()) == block().publishedMoves && asked <= bySizeAnswered.load(std::memory_order_relaxed)) {
    errno = saved;
    return;
  }
  // One thread a period gets past (give or take a race, which costs a second look, not a wrong page); where the
  // pool's lock is held, the next period tries again.
  lastPublishedNs.store(now, std::memory_order_relaxed);
  // The table only when asked, from the C library's heap (where it fails: published without it, asked again).
  SizeBuckets* bySize = asked > bySizeAnswered.load(std::memory_order_relaxed) ? new (std::nothrow) SizeBuckets : nullptr;
  PoolGauges gauges;
  bool taken = false;
  try {
    taken = pool.gauges(&gauges, when == Publish::Now, bySize);
  } catch (const std::bad_alloc&) {  // the list of free spans for the table: as above
    delete bySize;
    bySize = nullptr;
    taken = pool.gauges(&gauges, when == Publish::Now);
  }
  if (taken && !publishing.exchange(true, std::memory_order_acquire)) {
    writeGauges(gauges, bySize, now, asked);
    if (bySize) bySizeAnswered.store(asked, std::memory_order_relaxed);
    publishing.store(false, std::memory_order_release);
  }
  delete bySize;
  errno = saved;
}

TP_ALWAYS_RUN void statsPageBeforeFork() {
  if (!page.start) return;
  // A publication under way on another thread finishes first (it holds no lock of the pool's: it writes).
  while (publishing.exchange(true, std::memory_order_acquire)) sched_yield();
  memcpy(forkCopy, page.start, kPageBytes);
  forkCopied = true;
  publishing.store(false, std::memory_order_release);
}

TP_ALWAYS_RUN void statsPageAfterForkInParent() { forkCopied = false; }

TP_ALWAYS_RUN void statsPageInChild() {
  if (!page.start) return;
  if (!forkCopied) memcpy(forkCopy, page.start, kPageBytes);
  forkCopied = false;
  reinterpret_cast<StatsPageHeader*>(forkCopy)->pid = getpid();
  const int saved = errno;
  os::renewSharedPageInChild(kName, &page, forkCopy);
  bySizeAnswered.store(bySizeRequested(), std::memory_order_relaxed);  // the parent's requests, answered or not
  publishing.store(false, std::memory_order_relaxed);  // the child's only thread: none publishes
  lastPublishedNs.store(0, std::memory_order_relaxed);
  errno = saved;
}

}  // namespace tp::preload

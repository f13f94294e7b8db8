// The pool: the front every allocation goes through. It owns the size-class arenas (one per plan
// generation: the newest serves, older ones drain), the OS fallback, the counters, and the lock that makes
// it safe to use from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/adaptive_mutex.h"
#include "core/classes.h"
#include "core/decay.h"
#include "core/event_pool.h"
#include "core/fence.h"
#include "core/purge.h"
#include "core/header.h"
#include "core/offset_arena.h"
#include "core/pool_gauges.h"
#include "core/recorder.h"
#include "core/size_class_pool.h"

namespace tp {

enum class ReleaseStatus : uint8_t { Ok, NotOwned, NotLive, Stale };

struct PoolStats;

struct PoolOptions {
  ArenaOptions arena;
  Growth growth = Growth::Off;                       // whether and when a miss carves a block from spare reservation
  uint64_t growReserve = uint64_t{1} << 30;          // spare address space a growing pool may carve
  uint64_t osMapThreshold = uint64_t{256} << 10;     // OS fallbacks at least this large are mmap'd
  // realloc (resizeInPlace, allocMoved): an arena block grown past this many bytes moves into a mapping of
  // its own, as glibc's chunks past its mmap threshold live in theirs, which the OS then resizes without a
  // copy and unmaps once freed. kNoMappedGrowth: never. The bound rises as glibc's mmap threshold does: a
  // moved block freed raises it to its mapping's length (up to kMappedFromMost), so that blocks a program
  // reallocs to that size again and again stay in the arena rather than each mapping and faulting in fresh
  // pages, and unmapping them once freed.
  uint64_t reallocMappedFrom = kNoMappedGrowth;
  static constexpr uint64_t kNoMappedGrowth = UINT64_MAX;
  static constexpr uint64_t kMappedFromMost = uint64_t{32} << 20;  // glibc's DEFAULT_MMAP_THRESHOLD_MAX (64-bit)
  // Decay (core/decay.h): a free block or span of the default classes not handed out for this long (and for
  // DecayModel::kMarks iteration marks, where the program marks them) gives its pages back. kNoDecay: never.
  uint64_t decayMs = kNoDecay;
  static constexpr uint64_t kNoDecay = DecayModel::kNever;
  // Decay's clock: nanoseconds on a monotonic clock; nullptr, os::coarseMonotonicNs() (a tick late at most,
  // 1-10 ms, and cheaper than the fine clock: decay asks it on every alloc and free). Tests give a
  // synthetic one.
  uint64_t (*clock)() = nullptr;
  // releaseSoon(): what a queued release that turns out not to be one (NotOwned, NotLive) is reported to, by the
  // thread that applies it (with the pool's lock held). nullptr: ignored.
  void (*queuedReleaseFailed)(ReleaseStatus status) = nullptr;
  // Where the pool keeps its counters (stats() reads them there): storage of the caller's that outlives the
  // pool, holding PoolStats{} (the process pool's stats page, native/preload/stats_page.h, which other
  // processes read). nullptr: in the pool.
  PoolStats* counters = nullptr;
};

// How a request was served. OsMoved: a mapping of its own for a block realloc moved out of an arena (allocMoved).
enum class Route : uint8_t { Own = 0, Borrowed = 1, Grown = 2, OsFallback = 3, OsOversize = 4, Offset = 5, OsMoved = 6 };

// WouldMiss: alloc() was told a front cache holds blocks of `classIndex` or larger, and its class had no free
// block; nothing changed.
enum class AllocStatus : uint8_t { Ok, Closed, BadSize, OutOfMemory, WouldMiss };

struct Allocation {
  AllocStatus status = AllocStatus::Ok;
  void* data = nullptr;
  uint64_t serial = 0;
  Route route = Route::Own;
  int32_t classIndex = -1;  // the block's class (arena blocks), or the class WouldMiss wanted; else -1
  int32_t block = -1;       // a cacheable time-shared block's number in the layout (ScheduleEntry::block)
  // A front cache may keep the block when it is released: an arena block of classes whose blocks are
  // interchangeable, or a time-shared block its schedule keeps (Schedules::keeps); not in offsets mode.
  bool cacheable = false;
  // The block's bytes read as zero (fresh memory, or pages the pool gave back): calloc need not write them.
  bool zeroed = false;
};

// One entry of a front cache's log (applyCached): the owner released the block at `data` into the cache
// (bytes 0), or the cache served it again to a request of `bytes`.
struct CachedOp {
  const void* data;
  uint64_t bytes;
};

struct PoolStats {
  uint64_t allocs = 0, releases = 0, finalized = 0;
  uint64_t hits = 0, borrows = 0, grown = 0, osFallbacks = 0, osOversize = 0;
  uint64_t liveBlocks = 0, bytesLive = 0, peakBytesLive = 0;
  uint64_t osLiveBlocks = 0, osLiveBytes = 0;
  uint64_t arenaBytes = 0;      // carved from the arenas (blocks and their headers)
  uint64_t reservedBytes = 0;   // address space the arenas hold
  uint64_t committedBytes = 0;  // pre-faulted / locked by the arenas
  uint64_t arenas = 0;          // arenas alive (the serving one and any still draining)
  uint64_t unplannedBorrows = 0; // borrows the plan's schedule did not call for (the run left the plan)
  uint64_t iterations = 0;      // markIteration() calls
  uint64_t generation = 0;      // id of the serving classes: 1 at creation, larger with every switch
  uint64_t switches = 0;        // switches installed (switchPlan(), or prepareSwitch() then markIteration())
  uint64_t preparedGeneration = 0;  // id of classes prepared and waiting for the next markIteration(), or 0
  uint64_t scheduleHits = 0;    // allocations served where the plan's schedule put them
  uint64_t scheduleMisses = 0;  // scheduled positions whose size differed or whose class had no free block
  uint64_t offsetHits = 0;      // allocations served at their planned offset (offsets mode)
  uint64_t offsetMisses = 0;    // planned positions whose size differed or whose range was still in use
  uint64_t eventsCreated = 0;   // S4: events made because the event pool was empty
  uint64_t eventsReused = 0;    // ... and taken from it
  uint64_t deferredPending = 0; // released with a stream, waiting for it to pass their event
  uint64_t deferredBytes = 0;
  uint64_t cachedBlocks = 0;    // held by a front cache: neither live nor free
  uint64_t cachedBytes = 0;     // ... their capacity
  uint64_t cacheRejected = 0;   // front-cache log entries that named no block in the right state (ignored)
  bool closed = false;
  uint64_t purgedBlocks = 0;    // decay: free blocks whose pages were given back after sitting idle
  uint64_t purgedBytes = 0;     // ... their capacity
  uint64_t rewarmedBytes = 0;   // ... of those, bytes handed out again (counted as each decay epoch ends)
  uint64_t movedToMappings = 0; // allocMoved(): blocks realloc moved out of an arena into a mapping of their own
};

// What Pool::decayTick() found, for a thread that gives decay its turn while the program is quiet.
enum class DecayWatch : uint8_t {
  Busy,     // another thread held the pool's lock: nothing done
  Due,      // purges due beyond what one turn gives back (PurgeRequest::kBytesPerTurn): more at the next
  Idle,     // free memory decay may give back later (SizeClassPool::holdsIdle)
  Live,     // nothing idle, but blocks live in the serving arena: a release may make some
  Nothing,  // neither
  Off,      // the serving classes do not decay (no decayMs, a plan's classes), or the pool is closed
};

// What one iteration (the allocations since the previous mark) asked for and how it was served. Its
// pattern is the multiset of requested sizes: two iterations with equal allocs, bytes and sizeHash asked
// for the same sizes the same number of times (in any order), up to a 2^-53 chance of a hash collision.
struct IterationSummary {
  uint64_t allocs = 0;
  uint64_t bytes = 0;             // requested, summed
  uint64_t sizeHash = 0;          // order-independent hash of the requested sizes, 53 bits
  uint64_t osFallbacks = 0;       // of those allocations: served by the OS though a class holds them
  uint64_t osOversize = 0;        // ... served by the OS as larger than every class
  uint64_t unplannedBorrows = 0;  // ... served by a larger class the schedule did not name
  uint64_t grown = 0;             // ... served by a block carved for it (counted in unplannedBorrows as well when lent)
  uint64_t liveBlocks = 0;        // blocks live at the mark: carried into the next iteration
  uint64_t recorderEnd = 0;       // number of the next recorded event (the mark is the one before)
  uint64_t installed = 0;         // generation a prepared switch installed at this mark (serving from now), or 0
};

struct RecordingState {
  bool on = false;
  bool truncated = false;  // stopped because the event limit was reached
  uint64_t begin = 0, end = 0;  // numbers of the events held: [begin, end)
};

struct ClassStats {
  uint64_t size;
  ClassCounters counters;
};

class Pool : public FenceWatcher, public std::enable_shared_from_this<Pool> {
 public:
  // The largest single request: 2^47 bytes.
  static constexpr uint64_t kMaxRequest = uint64_t{1} << 47;

  // With `offsets`, the pool also has an offsets-mode arena laid out by that schedule, tried first.
  static std::shared_ptr<Pool> create(const PlanSpec& plan, const PoolOptions& options, std::string* error,
                                      const OffsetSchedule* offsets = nullptr);
  // The pool (of this process) in which `data` starts a live block, and that block's size; nullptr when
  // none does. Stream tasks use it to accept only pool memory.
  static std::shared_ptr<Pool> owning(const void* data, uint64_t* bytes);
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // A block of at least `bytes` (1 .. kMaxRequest), 64-byte aligned. When the plan has a schedule and this
  // is the k-th allocation since markIteration() with the size recorded for position k, the block comes
  // from the class training chose; otherwise (or when that class has no free block): own class, larger
  // classes ascending, then the OS.
  //
  // `cachedUpTo`: the largest class index of which a front cache holds blocks (-1: none). When the block
  // would not come off the free list of the class the request maps to (own, first fitting or scheduled) and
  // that class is <= cachedUpTo, the answer is WouldMiss and nothing changes: the cache gives its blocks
  // back first, so that a cached block is never why a request borrows, grows or goes to the OS.
  Allocation alloc(uint64_t bytes, int32_t cachedUpTo = -1);
  // An iteration ends and the next starts: the next allocation is position 0 of the schedule. Returns what
  // the iteration that ended asked for (since the previous mark, or creation).
  IterationSummary markIteration();
  // Serves new allocations from classes built from `plan` in a new arena. Blocks from before keep working
  // and go back to the arena they came from; an arena that no longer serves gives the pages of its free
  // blocks back to the OS (unless locked) and is unmapped once its last block is returned. The new arena is
  // pre-faulted per the pool's options only after that (discardRetired), so that the two are never resident
  // side by side: a pool switching from the default classes to a plan would otherwise peak at both. A pool
  // that grows (options.growth) grows its new classes once nothing free fits (Growth::AfterBorrowing), so
  // that a departure from the plan costs a block carved once, not an OS mapping faulted in each time; one
  // that does not grow sends such requests to the OS. False with *error (the pool unchanged) when the plan
  // is invalid, the OS refuses, or the pool is closed.
  bool switchPlan(const PlanSpec& plan, std::string* error);
  // The same switch in two steps, so that mapping and pre-faulting the new arena (about a second per GiB)
  // holds neither the pool's lock nor the thread that allocates: prepareSwitch builds the classes on the
  // calling thread (any thread) without the lock, and the next markIteration() installs them, so a plan
  // always starts serving at the start of an iteration. A newer preparation (a larger generation id: ids are
  // taken as building starts) replaces one not installed yet, and an older one finishing after it (or after
  // a newer one was installed) is dropped; close() drops it. Returns the generation prepared, or 0 with
  // *error (the pool unchanged).
  uint64_t prepareSwitch(const PlanSpec& plan, std::string* error);
  // The arena a markIteration() retired still holds its free blocks' pages: this gives them to the OS,
  // holding the lock only to list them, then pre-faults the new serving arena (per the pool's options), a
  // chunk at a time, while it serves (the binding runs it on a libuv thread after such a mark; a
  // synchronous switchPlan() runs it before it returns). Returns the bytes advised away.
  uint64_t discardRetired();
  // Trim (malloc_trim): gives back now the pages of every free block and free span of the serving classes,
  // what decay would give back once they sat idle (SizeClassPool::purgeAll), all of it at once, under the
  // lock; counted in purgedBlocks / purgedBytes as decay's purges are. Returns the bytes given back.
  // Pre: none (any thread, any pool, open or closed). Post: where the serving classes were carved on demand
  // (the default classes: SizeClassPool::decays()), whatever decayMs says, no free block of at least 4 pages
  // and no free span holds resident pages, but those the kernel refused to take and the plan's span reserve
  // (PlanSpec::spanReserve, kept resident by design); live, deferred and cached
  // blocks are untouched and every block reads as it did (a free one that is handed out again faults in
  // zeroed pages). Returns 0 and changes nothing for classes a plan pre-faulted by design, time-shared or
  // locked arenas, or a closed pool; retired arenas gave their free pages back when they retired
  // (discardRetired). Never throws (memory short for the spans' bookkeeping: it gives back what it did).
  uint64_t trim();
  // Decay's turn without an alloc, release or mark: for a program that stopped calling the pool but goes on
  // running (the process pool calls it now and then from the C library's side, and from a thread of its own
  // while the program is quiet), so that what it freed goes back once idle, as the program's next call would
  // have let it. Runs only if the lock is free: never waits. Returns what it found (DecayWatch), after applying
  // the releases queued so far (releaseSoon).
  DecayWatch decayTick();
  // The program is about to make no call for `ns` (its only thread sleeps): where that outlasts the decay period
  // (the options' decayMs times its current multiple), what decay would give back meanwhile goes back now, every
  // idle block and span (as trim()), counted as decay's purges; nothing where it is shorter or decay is off.
  // Runs only if the lock is free: never waits. Returns the bytes given back.
  uint64_t quietFor(uint64_t ns);
  // How long a quiet spell must last for quietFor() to give anything back (the decay period times its current
  // multiple), in nanoseconds; 0 where it would give back less than `worthBytes` however long (decay off, too
  // little idle and resident), or the lock is held. For a wait that may end early (a descriptor ready): it
  // waits that long first, where what it would give back is worth splitting the wait for.
  uint64_t quietPeriodNs(uint64_t worthBytes);
  // Memory beside the pool grew by `bytes` (the process pool's C library heap, past its high-water mark): the
  // serving classes' free spans give back as much now, whatever decay says, and no more (at most
  // PurgeRequest::kBytesPerTurn; SizeClassPool::purgeSpanBytes), so that the process does not hold both the pool's idle
  // memory and what took its place. Not where spansGiveBackLocked() is false. Runs only if the lock is free:
  // false, nothing done, where another thread holds it (as decayTick, never waits); true otherwise, whether or
  // not anything was free. Never throws.
  bool tryPurgeSpansFor(uint64_t bytes);

  // Fits the arenas' unused reservations into an address space limit lowered while the pool lives
  // (setrlimit(RLIMIT_AS) after start-up): `limit` is the limit, `mapped` the address space the process
  // maps now, these reservations included. The serving arena (and a prepared one) keeps spare room of at
  // most a kLimitedSpareShare-th of what the limit would leave without the reservations, retired arenas none,
  // so the program's own mappings and the C library's heap fit as they would without the pool (an arena that
  // grows in place takes more as it needs it). Returns the bytes of address space given back.
  uint64_t fitAddressSpace(uint64_t limit, uint64_t mapped);
  static constexpr uint64_t kLimitedSpareShare = 8;
  // A request failed under an RLIMIT_AS: every arena gives back the address space it holds but does not use,
  // its spare reservation and the free spans at its end (SizeClassPool::uncarveFreeTail), so that the
  // request can be made again with all of it. The arenas grow back as they need (ArenaOptions::growInPlace).
  // Returns the bytes of address space given back.
  uint64_t giveBackAddressSpace();

  // Recording of the events this pool serves (see recorder.h). startRecording keeps what is already held
  // and sets the limit on events held; copyRecording copies the events numbered [from, end()).
  void startRecording(uint64_t limit);
  void stopRecording();
  RecordingState recordingState() const;
  std::vector<RecordedEvent> copyRecording(uint64_t from) const;
  // Calls visit(events, count, state, context) once, under the pool's lock, with the events held from number
  // `from` on, in place: nothing is copied or allocated (a writer at _exit, or in a signal handler, may not).
  // visit must not call this pool.
  using RecordingVisit = void (*)(const RecordedEvent* events, size_t count, const RecordingState& state, void* context);
  void visitRecording(uint64_t from, RecordingVisit visit, void* context) const;
  void discardRecording(uint64_t before);
  // Returns a live block. NotOwned: `data` is not the start of a block this pool made; NotLive: it was
  // already released. Nothing changes unless the status is Ok.
  ReleaseStatus release(const void* data);
  // release() for a caller that need not wait for the lock (the process allocator's free()): where another
  // thread holds it, the release is queued (kQueuedSlots at most, else it waits as release() does) and the
  // next thread to take the lock applies it before anything else it does there, stats() included, so that
  // every count, trim and mark sees it. Returns release()'s status when applied now; Ok when queued, and a
  // queued one that fails goes to options.queuedReleaseFailed. Never queued while recording or where the
  // serving classes have a schedule or the pool an offsets arena (their events are ordered). On 2 cores with
  // 16 threads freeing blocks others allocated, a free waiting for the lock was most of the pool's cost
  // (futex sleeps and wake-ups: the contend bench, docs/benchmarks.md).
  ReleaseStatus releaseSoon(const void* data);
  static constexpr size_t kQueuedSlots = 64;
  // The same, for a block its owner moved elsewhere (realloc): where decay would give a block of a class's
  // pages back once idle, they go back now (a chain of reallocs otherwise holds a block in every class it
  // passed); a span's stay, as any freed span's (SizeClassPool::purgeGiven).
  ReleaseStatus releaseMoved(const void* data);
  // The finalizer's release: only when the block is still the live allocation numbered `serial`.
  ReleaseStatus releaseIfSerial(const void* data, uint64_t serial);
  // Bytes the live (or cached) block at `data` was allocated with, or 0 when it is neither in this pool.
  uint64_t liveSize(const void* data);
  // realloc in place: the live arena block at `data` now holds `bytes`, where its capacity allows (and
  // `bytes` is at least half of it, so that a shrunk block does not keep a large one busy). False, and
  // nothing changes, where it does not, for OS blocks, while recording (a trace has no resize), and where a
  // block below the mapping bound (options.reallocMappedFrom, as risen) would grow past it (allocMoved's to serve).
  bool resizeInPlace(const void* data, uint64_t bytes);
  // realloc of a block the OS mapped for it: the mapping is resized (os::remapAccounted: its pages move, they
  // are not copied), so a buffer growing past every class never holds two copies of itself. Returns where the
  // block's data now is (its serial and its bytes kept), or nullptr, nothing changed, for any other block, in a
  // locked pool, while a stream task may touch pool memory (pinned), while recording (a trace has no resize),
  // or when the OS refuses (errno set). Bytes the mapping gains, free spans give back (purgeForMappingLocked).
  void* resizeMapped(const void* data, uint64_t bytes);
  // A block of `bytes` (at least the mapping bound: options.reallocMappedFrom, as risen) in a mapping of its own (an OS block, as
  // resizeMapped resizes), for a block realloc grows out of the arena: the caller copies into it and releases
  // the old one (releaseMoved). Its later growth is then resizeMapped's (pages moved, not copied) where arena
  // spans would copy wherever they cannot grow in place, each copy beside the last, and once freed its pages
  // go back at once where a free span's would wait for decay. Counted in movedToMappings, neither as an OS fallback nor
  // in an iteration's osFallbacks: the classes could have held it. A position of the iteration as an alloc()
  // is. Returns the block's data, or nullptr, nothing changed, for a smaller request, a closed pool, where the serving classes
  // have a schedule or the pool has an offsets arena (their positions are a plan's: the caller allocs as it
  // would without this), or when the OS refuses (errno set). Free spans give back as many bytes as it maps
  // (purgeForMappingLocked): the block leaves the arena, whose memory would otherwise stay resident as well.
  void* allocMoved(uint64_t bytes);

  // Front cache (lib/pool/front-cache.ts): blocks its owner released that JS keeps to hand out again without
  // crossing into native code. The cache logs what it did; applyCached replays the log in order, so the
  // counters, the schedule's position, recording and the iteration summary are as if each had been an
  // alloc or release here. A release entry takes a live arena block to Cached, an alloc entry a Cached block
  // of at least `bytes` back to live; an entry that fits neither is ignored (counted in cacheRejected).
  void applyCached(const CachedOp* ops, size_t count);
  // A Cached block back to its free list: NotOwned / NotLive (not Cached) change nothing.
  ReleaseStatus returnCached(const void* data);
  // What a front cache may serve without asking, as Schedules::upcoming for the serving plan (at most
  // `max`), or -1 when the serving classes have no schedule (any block of the request's own class will do)
  // or the pool is closed.
  // With each entry, whether the cache may keep its block once released (Schedules::keeps).
  struct Upcoming {
    ScheduleEntry entry;
    bool keep;
  };
  static constexpr size_t kUpcomingMax = 64;  // entries upcoming() answers at most
  int64_t upcoming(Upcoming* out, size_t max) const;

  // Stream-ordered release (S4): the block stops being the caller's now but is reused only once `stream`
  // has passed an event recorded now (taken from the event pool). Statuses as release().
  ReleaseStatus releaseAfter(const void* data, const std::shared_ptr<FenceQueue>& stream);
  // Gives back the deferred blocks whose events have passed, their events back to the event pool (every
  // alloc does this first). Returns how many blocks came back.
  uint64_t reclaim();
  // Held by stream tasks that touch this pool's memory: while any pin is held, no arena is unmapped and no
  // OS block returned to the OS (released ones wait), so a task never writes into unmapped memory.
  std::shared_ptr<void> pin();
  // With pooling off, every event is made and destroyed (the benchmark's comparison).
  void setEventPooling(bool pooling);
  // A closed pool reclaims as its streams move on (nobody allocates any more to do it).
  void onProgress(uint64_t completed) override;

  // Stops serving. Arenas are unmapped as soon as no block of theirs is outstanding (at once if none is);
  // blocks still live can be released later. Idempotent.
  void close();

  // fork() in a threaded process (the process allocator's pthread_atfork handlers): the lock is held across
  // the fork, so that the child's copy of the pool is not caught half-changed, and let go in both processes.
  // In the child, the releases queued before the fork are applied first (the threads that queued them are gone).
  void lockForFork() { mu_.lock(); }
  void unlockAfterFork(bool child);

  PoolStats stats() const;
  // The live view's gauges (pool_gauges.h), and with `bySize` every block and span of the arenas and every OS
  // block by size: taken under the lock where it is free, or with `wait`, once it is; false, nothing written,
  // where it is held and `wait` is false. Work: the classes and arenas; with `bySize`, every span too.
  bool gauges(PoolGauges* out, bool wait, SizeBuckets* bySize = nullptr) const;
  std::vector<ClassStats> classStats() const;  // of the serving arena's classes
  uint64_t interval() const;
  // Why the OS refused the last allocation that ended in OutOfMemory ("" before any did).
  std::string lastRefusal() const;

 private:
  Pool(const PoolOptions& options, uint64_t secret)
      : options_(options),
        secret_(secret),
        counters_(options.counters ? *options.counters : ownCounters_),
        mappedFrom_(options.reallocMappedFrom),
        decay_(options.decayMs, nowOf(options)) {}
  // Decay's clock now (PoolOptions::clock).
  static uint64_t nowOf(const PoolOptions& options);
  uint64_t nowLocked() const { return nowOf(options_); }
  // The serving classes' free memory given back, as `request` asks (purge.h), counted; the bytes given back.
  uint64_t purgeLocked(const PurgeRequest& request);
  // The lock, as every public call takes it: the queued releases (releaseSoon) are applied once it is held,
  // and those queued while it was held are applied after it is let go, by whoever takes it then (this
  // thread, if none does meanwhile), so that no release waits in the queue for a pool nobody calls.
  class Locked {
   public:
    explicit Locked(const Pool& pool);
    Locked(const Pool& pool, std::adopt_lock_t);  // the lock already held by this thread
    ~Locked();
    Locked(const Locked&) = delete;
    Locked& operator=(const Locked&) = delete;

   private:
    Pool& pool_;
  };
  // Lets the lock go, then applies what was queued meanwhile where no other thread takes the lock to.
  void unlockApplyingQueued();
  // Applies the queued releases; `all`: every slot, whatever queued_ says (the child of a fork, alone).
  // Inline, the look that finds none queued (every call's lock takes it).
  void applyQueuedLocked(bool all = false) noexcept {
    if (all || queued_.load(std::memory_order_acquire) != 0) applyQueuedSlotsLocked(all);
  }
  void applyQueuedSlotsLocked(bool all) noexcept;
  // Whether releaseSoon may queue: no recording, no schedule, no offsets arena.
  void updateQueueableLocked();
  Allocation allocFromOs(uint64_t bytes, Route route);
  PoolStats statsLocked() const;
  // Counts a served allocation; returns it whole (built once, in place: a result patched field by field
  // afterwards is copied out through a store-forwarding stall).
  Allocation counted(void* data, uint64_t bytes, uint64_t serial, Route route, int32_t classIndex = -1, bool cacheable = false,
                     int32_t block = -1, bool zeroed = false);
  // Decay's turn on an alloc, a release or a mark: ends the epoch when it is due, then purges a bounded
  // number of due blocks of the serving classes. Never throws (decayStepLocked's std::bad_alloc is dropped).
  // Inline, the turn that has nothing to do: decay off, or the epoch's period not yet passed, and nothing due
  // (the clock is read only where decay is on).
  void decayLocked() {
    if ((decay_.on() && decay_.periodPassed(nowLocked())) || (!generations_.empty() && generations_.back()->hasDuePurges())) {
      decayTurnLocked();
    }
  }
  void decayTurnLocked();
  void decayStepLocked();
  // Whether the serving classes decay: decayMs set, the pool open, and classes carved on demand
  // (SizeClassPool::decays(); a plan's do not).
  bool decaysLocked() const;
  // Every idle block and span of the serving classes given back (SizeClassPool::purgeAll), counted as decay's
  // purges. Returns the bytes given back; never throws (what was given back before a std::bad_alloc stays so).
  uint64_t purgeAllLocked();
  // allocMoved and resizeMapped mapped `mappedBytes` for a block realloc moved out of an arena (or grew its
  // mapping): the serving classes' free spans give back as much (SizeClassPool::purgeSpansFor), at most
  // PurgeRequest::kBytesPerTurn a call, so that the process does not hold both the mapping and the arena memory the
  // block left until decay. Not where
  // the pool does not decay, nor where the serving classes have a schedule (a plan's memory).
  void purgeForMappingLocked(uint64_t mappedBytes);
  // The serving arena grew by `grownBytes` for a request of `bytes` that no free memory of the pool's held (for a
  // span realloc grew in place past the arena's end, `bytes` is what the realloc adds). Where the arena's resident memory (its live blocks and the free
  // memory decay has not given back yet) then exceeds the most ever live by more than an eighth
  // (kGrowthSlackDivisor), its free spans give back that excess, at most `grownBytes`
  // (PurgeReason::ArenaGrew): a program whose buffers keep growing (a dict's table, a vector) holds about
  // what glibc, which unmaps a mapped chunk at free, would, and a loop that reuses its memory every
  // iteration, whose arena stays within that bound, gives back nothing. Not where spansGiveBackLocked() is false.
  void purgeForGrowthLocked(uint64_t grownBytes, uint64_t bytes);
  // The OS mapped `bytes` for a block beside the serving arena (Route::OsOversize, OsFallback): its free spans
  // give back as much (PurgeReason::OsBlock), so that a program that frees a large block and then asks for a
  // larger one holds what glibc, which unmaps the first, would, rather than both until decay. Until memory given
  // back for memory beside the pool is handed out again after such a purge: the program then reuses what it frees
  // (a loop), which from then on waits for decay, as the pool's other memory. Not where spansGiveBackLocked() is
  // false.
  void purgeForOsBlockLocked(uint64_t bytes);
  static constexpr uint64_t kGrowthSlackDivisor = 8;
  static constexpr uint64_t kPurgeForMappingStep = uint64_t{1} << 20;
  // Whether free spans give their pages back before decay does: not where the pool does not decay, nor where
  // the serving classes have a schedule (a plan's memory).
  bool spansGiveBackLocked() const;
  Route countSourceLocked(Source source, bool scheduled);
  void applyCachedLocked(const CachedOp& op);
  void countReleaseLocked(uint64_t serial, uint64_t bytes);
  void uncacheLocked(const BlockHeader* header);  // a Cached block leaves the front cache's counters
  BlockHeader* findLocked(const void* data) const;
  ReleaseStatus releaseLocked(const void* data, uint64_t serial, bool bySerial);
  void returnBlockLocked(BlockHeader* header);
  uint64_t reclaimLocked();
  void unpin();
  void unmapOsBlock(BlockHeader* header);
  SizeClassPool* generationLocked(uint32_t id) const;
  void dropDrainedLocked();
  void recordReleaseLocked(uint64_t serial, const FenceQueue* stream);
  std::unique_ptr<SizeClassPool> buildGeneration(const PlanSpec& plan, std::string* error);
  // Switched arenas are built without pre-faulting and pre-faulted by discardRetired(), after the retired
  // arenas gave their free pages back: where the pool pre-faults, unless it locks (mlock makes pages resident
  // as it locks them, when the arena is built).
  bool populatesAfterSwitch() const { return options_.arena.prefault && !options_.arena.lock; }
  // Pre-faults the first `bytes` (its planned blocks) of generation `id`'s arena, a chunk at a time, as long
  // as it serves.
  void populateServing(uint32_t id, uint64_t bytes);
  // The classes built for a switch serve from now; the serving ones retire (discardRetired() gives their free
  // pages back, then pre-faults the new arena).
  void installLocked(std::unique_ptr<SizeClassPool> generation);

  mutable AdaptiveMutex mu_;
  PoolOptions options_;
  uint64_t secret_;
  std::vector<std::unique_ptr<SizeClassPool>> generations_;  // back() serves
  std::unique_ptr<SizeClassPool> prepared_;                  // installed by the next markIteration()
  std::atomic<uint32_t> lastGeneration_{1};                  // ids are never reused: headers name their arena by id
  std::vector<uint32_t> undiscarded_;                        // retired at a mark, free pages not yet discarded
  // The generation installed last and its planned bytes, while its arena is not pre-faulted yet
  // (populatesAfterSwitch), else {0, 0}.
  std::pair<uint32_t, uint64_t> unpopulated_{0, 0};
  // The generations discardRetired() calls are pre-faulting (two may overlap after switches in quick
  // succession), and where they go when dropped meanwhile (closed, or replaced and drained): unmapped only
  // once their populate is done with them.
  std::vector<uint32_t> populating_;
  std::vector<std::unique_ptr<SizeClassPool>> populatingDropped_;
  std::unique_ptr<OffsetArena> offsetArena_;                 // offsets mode, when planned
  std::unordered_set<BlockHeader*> osLive_;
  PoolStats ownCounters_;
  PoolStats& counters_;  // ownCounters_, or options_.counters
  uint64_t mappedUnpurged_ = 0;  // purgeForMappingLocked: bytes mapped since its last purge
  bool osBlockPurged_ = false;      // purgeForOsBlockLocked gave something back
  bool osBlocksKeepSpans_ = false;  // ... and memory given back was handed out again after it: it gives back no more
  uint64_t mappedFrom_;          // options_.reallocMappedFrom, raised by moved blocks freed (PoolOptions)
  uint64_t nextSerial_ = 1;
  std::string lastRefusal_;
  uint64_t cursor_ = 0;  // allocations since markIteration(): the offset schedule's position of the next one
  Schedules::Cursor scheduleCursor_;  // where the serving plan's schedules stand
  IterationSummary tally_;  // of the iteration under way (the os* and borrow fields: counters at its start)
  Recorder recorder_;
  DecayModel decay_;                 // when free memory has been idle long enough (decay.h)

  struct Deferred {
    const void* data;
    StreamEvent* event;
    uint64_t bytes;
  };
  EventPool events_;
  std::vector<std::pair<FenceQueue*, std::deque<Deferred>>> deferred_;  // per stream, in release order
  std::atomic<uint64_t> pins_{0};
  // releaseSoon's queue: slots a releasing thread fills (nullptr: empty), emptied under the lock; queued_
  // counts the slots filled and those being filled (never fewer than are filled).
  std::atomic<const void*> queuedReleases_[kQueuedSlots] = {};
  std::atomic<uint64_t> queued_{0};
  std::atomic<bool> queueable_{false};
  std::vector<BlockHeader*> zombies_;  // OS blocks released while pinned: unmapped once unpinned
};

}  // namespace tp

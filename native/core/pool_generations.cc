// Pool's generations: the serving classes, plan switches (built off the lock, installed at a mark), retired
// arenas draining, and the arenas' address space fitted to a limit.
#include "core/pool.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "core/arena.h"
#include "os/os.h"

namespace tp {

SizeClassPool* Pool::generationLocked(uint32_t id) const {
  for (const auto& generation : generations_) {
    if (generation->id() == id) return generation.get();
  }
  return nullptr;
}

// Unmaps every arena that no longer serves and has no block outstanding. The newest arena serves until the
// pool is closed; older ones only drain. Called from every release: it allocates nothing there (a free must
// not fail where the C library can give no memory: a vector built per call made glibc's tst-dynarray-fail
// abort under RLIMIT_AS), only to keep an arena whose populate is in flight, and then keeps it in
// generations_ should that fail.
void Pool::dropDrainedLocked() {
  if (pins_.load(std::memory_order_acquire) != 0) return;  // a stream task may still touch an arena
  const size_t draining = counters_.closed ? generations_.size() : generations_.size() - 1;
  size_t kept = 0;
  for (size_t i = 0; i < generations_.size(); ++i) {
    std::unique_ptr<SizeClassPool>& generation = generations_[i];
    bool drained = i < draining && generation->outstandingBlocks() == 0;
    if (drained && std::find(populating_.begin(), populating_.end(), generation->id()) != populating_.end()) {
      try {
        populatingDropped_.push_back(std::move(generation));  // unmapped once its populate is done with it
      } catch (const std::bad_alloc&) {
        drained = false;  // push_back moved nothing: kept, and dropped at a later release
      }
    }
    if (!drained) {
      if (kept != i) generations_[kept] = std::move(generation);  // a drained one there is unmapped now
      ++kept;
    }
  }
  generations_.resize(kept);  // shrinking: no allocation; the drained arenas left are unmapped
  if (counters_.closed && offsetArena_ && offsetArena_->liveBlocks() == 0) offsetArena_.reset();
}

// Builds the classes of `plan` in a new arena without the lock: secret_ and options_ never change after
// creation, and mapping and pre-faulting take long.
std::unique_ptr<SizeClassPool> Pool::buildGeneration(const PlanSpec& plan, std::string* error) {
  {
    const Locked lock(*this);
    if (counters_.closed) {
      *error = "the pool is closed";
      return nullptr;
    }
  }
  ArenaOptions arena = options_.arena;
  if (populatesAfterSwitch()) arena.prefault = false;
  if (options_.growth == Growth::Off) return SizeClassPool::create(++lastGeneration_, secret_, plan, arena, Growth::Off, 0, error);
  // Room for what growth may carve (SizeClassPool::growthAllowed: twice the peak outstanding, plus slack),
  // not the whole reservation of the default classes: a draining generation keeps its reservation.
  const uint64_t reserve = options_.growReserve;
  uint64_t planned = 0, largest = 0;  // the classes' bytes, up to the reservation (create refuses a plan too large)
  for (const PlanClass& c : plan.classes) {
    const uint64_t stride = SizeClassPool::strideOf(c.size);
    planned = c.blocks > (reserve - planned) / stride ? reserve : planned + stride * c.blocks;
    largest = std::max(largest, c.size);
  }
  const uint64_t room = std::min(reserve, 2 * planned + (uint64_t{64} << 20));
  // The default classes above the plan's largest, with no block: a request larger than the plan knows (a
  // new input shape, until a re-plan lays it out) grows a block there instead of going to the OS each time.
  // Appended above every class, they leave the plan's class numbers (its schedule's, its layout's) as they are.
  PlanSpec grown = plan;
  for (const PlanClass& c : defaultPlan().classes) {
    const uint64_t size = plan.interval == 0 ? c.size : roundUp(c.size, plan.interval);
    if (size > largest) grown.classes.push_back({size, 0});
    largest = std::max(largest, size);
  }
  return SizeClassPool::create(++lastGeneration_, secret_, grown, arena, Growth::AfterBorrowing, room, error);
}

bool Pool::switchPlan(const PlanSpec& plan, std::string* error) {
  std::unique_ptr<SizeClassPool> generation = buildGeneration(plan, error);
  if (!generation) return false;
  {
    const Locked lock(*this);
    if (counters_.closed) {
      *error = "the pool was closed during the switch";
      return false;  // the new arena is unmapped as `generation` goes
    }
    installLocked(std::move(generation));
  }
  discardRetired();
  return true;
}

uint64_t Pool::prepareSwitch(const PlanSpec& plan, std::string* error) {
  std::unique_ptr<SizeClassPool> generation = buildGeneration(plan, error);
  if (!generation) return 0;
  const uint64_t id = generation->id();
  std::unique_ptr<SizeClassPool> replaced;  // unmapped after the lock is let go
  const Locked lock(*this);
  if (counters_.closed) {
    *error = "the pool was closed while the switch was prepared";
    replaced = std::move(generation);
    return 0;
  }
  // Preparations racing each other finish in any order: the newest (the largest id) is the one that waits,
  // so that a mark never installs an older plan after a newer one.
  if ((prepared_ && prepared_->id() > id) || generations_.back()->id() > id) {
    replaced = std::move(generation);
    return id;
  }
  replaced = std::move(prepared_);
  prepared_ = std::move(generation);
  return id;
}

uint64_t Pool::discardRetired() {
  std::vector<std::pair<const Arena*, std::vector<std::pair<char*, uint64_t>>>> work;
  std::pair<uint32_t, uint64_t> populate{0, 0};
  std::shared_ptr<void> pinned;  // no arena is unmapped while its pages are advised away or faulted in
  {
    const Locked lock(*this);
    for (uint32_t id : undiscarded_) {
      if (const SizeClassPool* generation = generationLocked(id)) work.emplace_back(&generation->arena(), generation->freeRanges());
    }
    undiscarded_.clear();
    std::swap(populate, unpopulated_);
    if (!work.empty() || populate.first != 0) pinned = pin();
  }
  uint64_t bytes = 0;
  for (const auto& [arena, ranges] : work) {
    for (const auto& [start, length] : ranges) {
      arena->discard(start, length);
      bytes += length;
    }
  }
  pinned.reset();  // the populate keeps its own arena mapped, and no other
  if (populate.first != 0) populateServing(populate.first, populate.second);
  return bytes;
}

uint64_t Pool::giveBackAddressSpace() {
  const Locked lock(*this);
  uint64_t released = 0;
  for (const auto& generation : generations_) {
    generation->uncarveFreeTail();
    released += generation->releaseSpare(0);
  }
  if (prepared_) released += prepared_->releaseSpare(0);
  return released;
}

uint64_t Pool::fitAddressSpace(uint64_t limit, uint64_t mapped) {
  const Locked lock(*this);
  auto spareOf = [](const SizeClassPool& generation) { return generation.arena().reservedBytes() - generation.arena().carvedBytes(); };
  uint64_t spares = 0;
  for (const auto& generation : generations_) spares += spareOf(*generation);
  if (prepared_) spares += spareOf(*prepared_);
  const uint64_t others = mapped > spares ? mapped - spares : 0;
  const uint64_t keep = limit > others ? (limit - others) / kLimitedSpareShare : 0;
  uint64_t released = 0;
  for (size_t i = 0; i < generations_.size(); ++i) released += generations_[i]->releaseSpare(i + 1 == generations_.size() ? keep : 0);
  if (prepared_) released += prepared_->releaseSpare(keep);
  return released;
}

void Pool::populateServing(uint32_t id, uint64_t bytes) {
  const Arena* arena;
  {
    const Locked lock(*this);
    if (counters_.closed || generations_.back()->id() != id) return;
    arena = &generations_.back()->arena();
    populating_.push_back(id);
  }
  // A chunk at a time, so that a newer switch or close() stops it: a retired arena is not made resident.
  constexpr uint64_t kChunk = uint64_t{32} << 20;
  for (uint64_t done = 0; done < bytes; done += kChunk) {
    if (!arena->populateInUse(arena->base() + done, std::min(kChunk, bytes - done))) break;
    const Locked lock(*this);
    if (counters_.closed || generations_.back()->id() != id) break;
  }
  std::unique_ptr<SizeClassPool> dropped;  // unmapped after the lock is let go
  const Locked lock(*this);
  populating_.erase(std::find(populating_.begin(), populating_.end(), id));
  for (auto it = populatingDropped_.begin(); it != populatingDropped_.end(); ++it) {
    if ((*it)->id() != id) continue;
    dropped = std::move(*it);
    populatingDropped_.erase(it);
    break;
  }
}

void Pool::installLocked(std::unique_ptr<SizeClassPool> generation) {
  counters_.generation = generation->id();
  counters_.switches++;
  generations_.back()->retire(false);
  undiscarded_.push_back(generations_.back()->id());
  unpopulated_ = populatesAfterSwitch() ? std::make_pair(generation->id(), generation->arena().carvedBytes()) : std::make_pair(0u, uint64_t{0});
  generations_.push_back(std::move(generation));
  generations_.back()->schedules().begin(&scheduleCursor_, 0);
  updateQueueableLocked();
  dropDrainedLocked();
}

}  // namespace tp

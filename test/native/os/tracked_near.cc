// The folded table free() looks at first (os::mayBeTrackedMapping) against the exact one (isTrackedMapping):
// in a process of its own, as tracking is process-wide and aligns every later mapping to a granule.
//   quiescent  after each way a tracked mapping is made, grown, shrunk, moved and unmapped (mapMemory,
//              mapAccounted, mapGrowable, extendMapping, unmapTail, remapAccounted, unmapMemory), for every
//              granule of the mappings and around them: mayBeTrackedMapping(p) is exactly whether p lies at
//              or above the lowest granule tracked so far (trackedFrom), below the end of the highest
//              (trackedTo), and any granule sharing p's entry is tracked (so a block the pool holds is never
//              taken for another's, and an entry goes back to zero once the pool's granules there are gone);
//              trackedFrom and trackedTo hold every mapping made between them.
//   placed     tracked mappings lie together in [96 TiB, 120 TiB) where the kernel agrees (MAP_FIXED_NOREPLACE):
//              the growable one at the origin, the others below it, so that both free()'s compares hold the
//              pool's memory between them; granules given back are taken again (mappings made and unmapped in
//              turn do not wander down the range), and a mapping not ours in the way is stepped over.
//   threads    two threads map and unmap while a third reads: a granule a thread holds mapped is never
//              seen as outside the pool, whatever the others do to the entries it shares.
// Exit 0 when every check held; else the first failed check on stderr and exit 1.
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "os/os.h"

namespace {

using tp::os::kTrackGranule;
constexpr unsigned kGranuleShift = tp::os::detail::kGranuleShift;
constexpr uint64_t kNearEntries = tp::os::detail::kNearEntries;
constexpr uint64_t kUserGranules = (uint64_t{1} << 47) >> kGranuleShift;

#define CHECK(cond)                                                 \
  do {                                                              \
    if (!(cond)) {                                                  \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      exit(1);                                                      \
    }                                                               \
  } while (0)

// Whether any granule of the user address space that shares p's entry of the folded table is tracked.
bool anyTrackedSharing(uintptr_t p) {
  for (uint64_t g = (p >> kGranuleShift) % kNearEntries; g < kUserGranules; g += kNearEntries) {
    if (tp::os::isTrackedMapping(reinterpret_cast<void*>(g << kGranuleShift))) return true;
  }
  return false;
}

// The two tables agree on every granule of [start - 2 granules, start + bytes + 2 granules).
void checkAround(const void* start, size_t bytes) {
  const uintptr_t from = reinterpret_cast<uintptr_t>(start) - 2 * kTrackGranule;
  const uintptr_t to = reinterpret_cast<uintptr_t>(start) + bytes + 2 * kTrackGranule;
  const uintptr_t trackedFrom = tp::os::detail::trackedFrom.load(), trackedTo = tp::os::detail::trackedTo.load();
  CHECK(trackedFrom <= reinterpret_cast<uintptr_t>(start));
  CHECK(trackedTo >= reinterpret_cast<uintptr_t>(start) + bytes);
  for (uintptr_t p = from; p < to; p += kTrackGranule / 2) {
    CHECK(tp::os::mayBeTrackedMapping(reinterpret_cast<void*>(p)) == (p >= trackedFrom && p < trackedTo && anyTrackedSharing(p)));
    if (tp::os::isTrackedMapping(reinterpret_cast<void*>(p))) CHECK(tp::os::mayBeTrackedMapping(reinterpret_cast<void*>(p)));
  }
}

void quiescent() {
  const size_t page = tp::os::pageSize();
  char* one = static_cast<char*>(tp::os::mapMemory(page, page));
  CHECK(one != nullptr && tp::os::isTrackedMapping(one));
  checkAround(one, kTrackGranule);
  char* three = static_cast<char*>(tp::os::mapAccounted(2 * kTrackGranule + page, page));
  CHECK(three != nullptr && tp::os::isTrackedMapping(three + 2 * kTrackGranule));
  checkAround(three, 3 * kTrackGranule);

  char* growable = static_cast<char*>(tp::os::mapGrowable(kTrackGranule));
  CHECK(growable != nullptr);
  checkAround(growable, kTrackGranule);
  const bool grew = tp::os::extendMapping(growable, kTrackGranule, 4 * kTrackGranule);
  checkAround(growable, 4 * kTrackGranule);
  const size_t growableBytes = grew ? 4 * kTrackGranule : kTrackGranule;
  if (grew) {
    CHECK(tp::os::unmapTail(growable, growableBytes, 2 * kTrackGranule) == 0);
    checkAround(growable, 4 * kTrackGranule);
  }
  const size_t growableLeft = grew ? 2 * kTrackGranule : kTrackGranule;

  // Resized by the OS: grown past its granules (in place or moved), then shrunk.
  char* moved = static_cast<char*>(tp::os::remapAccounted(three, 2 * kTrackGranule + page, 5 * kTrackGranule));
  CHECK(moved != nullptr);
  checkAround(three, 3 * kTrackGranule);
  checkAround(moved, 5 * kTrackGranule);
  char* shrunk = static_cast<char*>(tp::os::remapAccounted(moved, 5 * kTrackGranule, page));
  CHECK(shrunk != nullptr);
  checkAround(moved, 5 * kTrackGranule);
  checkAround(shrunk, kTrackGranule);

  CHECK(tp::os::unmapMemory(one, page) == 0);
  checkAround(one, kTrackGranule);
  CHECK(tp::os::unmapMemory(shrunk, page) == 0);
  checkAround(shrunk, kTrackGranule);
  CHECK(tp::os::unmapMemory(growable, growableLeft) == 0);
  checkAround(growable, 4 * kTrackGranule);
}

void placed() {
  constexpr uintptr_t kFrom = uintptr_t{96} << 40, kTo = uintptr_t{120} << 40;
  const size_t page = tp::os::pageSize();
  auto inRange = [&](const void* p, size_t bytes) {
    const uintptr_t at = reinterpret_cast<uintptr_t>(p);
    return at >= kFrom && at + bytes <= kTo;
  };
  char* growable = static_cast<char*>(tp::os::mapGrowable(4 * kTrackGranule));
  CHECK(growable != nullptr && inRange(growable, 4 * kTrackGranule));
  char* below = static_cast<char*>(tp::os::mapMemory(3 * kTrackGranule, page));
  CHECK(below != nullptr && inRange(below, 3 * kTrackGranule) && below + 3 * kTrackGranule <= growable);
  // Made and unmapped in turn, with one held throughout: the lowest granule ever tracked stays put.
  void* first = tp::os::mapAccounted(5 * kTrackGranule, page);
  CHECK(first != nullptr && tp::os::unmapMemory(first, 5 * kTrackGranule) == 0);
  const uintptr_t lowest = tp::os::detail::trackedFrom.load();
  for (int i = 0; i < 1000; ++i) {
    void* again = tp::os::mapAccounted(1 + (i % 5) * kTrackGranule, page);
    CHECK(again != nullptr && inRange(again, kTrackGranule));
    CHECK(tp::os::unmapMemory(again, 1 + (i % 5) * kTrackGranule) == 0);
  }
  CHECK(tp::os::detail::trackedFrom.load() == lowest);
  // Below a wide one (whole words of the exact table tracked), still in the range.
  char* wide = static_cast<char*>(tp::os::mapMemory(200 * kTrackGranule, page));
  CHECK(wide != nullptr && inRange(wide, 200 * kTrackGranule));
  char* next = static_cast<char*>(tp::os::mapMemory(kTrackGranule, page));
  CHECK(next != nullptr && inRange(next, kTrackGranule));
  CHECK(tp::os::unmapMemory(next, kTrackGranule) == 0 && tp::os::unmapMemory(wide, 200 * kTrackGranule) == 0);
  // A mapping of someone else's just below ours: the next is placed elsewhere in the range, not over it.
  const uintptr_t under = lowest - kTrackGranule;
  void* foreign = mmap(reinterpret_cast<void*>(under), kTrackGranule, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  CHECK(foreign == reinterpret_cast<void*>(under));
  void* past = tp::os::mapMemory(6 * kTrackGranule, page);
  CHECK(past != nullptr && inRange(past, 6 * kTrackGranule) && !tp::os::isTrackedMapping(foreign));
  CHECK(tp::os::detail::trackedTo.load() >= reinterpret_cast<uintptr_t>(growable) + 4 * kTrackGranule);
  CHECK(tp::os::unmapMemory(past, 6 * kTrackGranule) == 0 && munmap(foreign, kTrackGranule) == 0);
  CHECK(tp::os::unmapMemory(below, 3 * kTrackGranule) == 0 && tp::os::unmapMemory(growable, 4 * kTrackGranule) == 0);
}

void threads() {
  std::atomic<bool> stop{false};
  std::atomic<bool> wrong{false};
  auto churn = [&] {
    const size_t page = tp::os::pageSize();
    for (int i = 0; i < 2000; ++i) {
      void* mine = tp::os::mapMemory(page, page);
      if (!mine) continue;
      if (!tp::os::mayBeTrackedMapping(mine)) wrong.store(true);
      tp::os::unmapMemory(mine, page);
    }
  };
  // A mapping held throughout, while the others' entries are counted up and down: its own stays non-zero.
  void* held = tp::os::mapMemory(tp::os::pageSize(), tp::os::pageSize());
  CHECK(held != nullptr);
  std::thread reader([&] {
    while (!stop.load()) {
      if (!tp::os::mayBeTrackedMapping(held)) wrong.store(true);
    }
  });
  std::vector<std::thread> workers;
  for (int i = 0; i < 2; ++i) workers.emplace_back(churn);
  for (auto& w : workers) w.join();
  stop.store(true);
  reader.join();
  CHECK(!wrong.load());
  checkAround(held, kTrackGranule);
  CHECK(tp::os::unmapMemory(held, tp::os::pageSize()) == 0);
  checkAround(held, kTrackGranule);
}

}  // namespace

int main() {
  CHECK(tp::os::trackMappings());
  placed();
  quiescent();
  threads();
  puts("tracked-near: ok");
  return 0;
}

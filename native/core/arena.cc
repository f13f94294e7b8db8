#include "core/arena.h"

#include <errno.h>
#include <string.h>

#include "core/header.h"
#include "os/os.h"
#include "os/probes.h"

namespace tp {

std::string lockRefusal(uint64_t bytes, int err) {
  const uint64_t limit = os::lockLimitBytes();
  std::string message = "mlock of " + std::to_string(bytes) + " bytes refused (" + strerror(err) +
                        "): page-locked memory is limited by RLIMIT_MEMLOCK (soft limit ";
  message += limit == UINT64_MAX ? std::string("unlimited") : std::to_string(limit) + " bytes";
  message += "); raise it with `ulimit -l` or run without the lock option";
  return message;
}

std::unique_ptr<Arena> Arena::create(uint64_t reserveBytes, uint64_t commitBytes, const ArenaOptions& options,
                                     std::string* error) {
  // Pre-faulting (or locking) more than the machine has ends in swap or the OOM killer, not in a failed
  // call: refused before anything is mapped (the process allocator's plans; lib/pool/pool.ts checks first).
  if ((options.prefault || options.lock) && commitBytes > os::physicalMemoryBytes()) {
    *error = "the plan's arena of " + std::to_string(commitBytes) + " bytes is larger than this machine's memory (" +
             std::to_string(os::physicalMemoryBytes()) + " bytes)";
    return nullptr;
  }
  const uint64_t alignment = options.hugePages ? os::kHugePageSize : os::pageSize();
  const uint64_t reserved = roundUp(reserveBytes == 0 ? 1 : reserveBytes, alignment);
  void* base = options.growInPlace ? os::mapGrowable(reserved) : os::mapMemory(reserved, alignment);
  if (!base) {
    *error = "could not reserve " + std::to_string(reserved) + " bytes of address space: " + strerror(errno);
    return nullptr;
  }
  if (options.hugePages) os::adviseHugePages(base, reserved);  // advice: failure only means small pages
  std::unique_ptr<Arena> arena(new Arena(static_cast<char*>(base), reserved, options));
  if (!arena->commitUpTo(commitBytes < reserved ? commitBytes : reserved, error)) return nullptr;
  return arena;
}

Arena::~Arena() { os::unmapMemory(base_, reserved_); }

bool Arena::commitUpTo(uint64_t upTo, std::string* error) {
  if (!options_.prefault && !options_.lock) return true;
  const uint64_t end = roundUp(upTo, os::pageSize());
  // Pages carved without a commit stay as they are: a populate would fault in what nobody has touched.
  const uint64_t from = committedEnd_ > carved_ ? committedEnd_ : roundUp(carved_, os::pageSize());
  if (end <= from) return true;
  char* start = base_ + from;
  const uint64_t bytes = end - from;
  if (options_.lock) {
    if (os::lockMemory(start, bytes) != 0) {
      *error = lockRefusal(bytes, errno);
      return false;
    }
  }
  if (options_.prefault && os::populateMemory(start, bytes) != 0) {
    *error = "could not pre-fault " + std::to_string(bytes) + " bytes: " + strerror(errno);
    return false;
  }
  committed_ += bytes;
  committedEnd_ = end;
  return true;
}

bool Arena::populateInUse(char* start, uint64_t bytes) const {
  const uintptr_t page = os::pageSize();
  const uintptr_t from = reinterpret_cast<uintptr_t>(start) / page * page;
  const uintptr_t to = roundUp(reinterpret_cast<uintptr_t>(start) + bytes, page);
  if (to <= from) return true;
  if (os::populateInPlace(reinterpret_cast<void*>(from), to - from) != 0) return false;
  committed_.fetch_add(to - from, std::memory_order_relaxed);
  return true;
}

bool Arena::discard(char* start, uint64_t bytes) const {
  if (options_.lock) return false;
  const uintptr_t page = os::pageSize();
  const uintptr_t from = roundUp(reinterpret_cast<uintptr_t>(start), page);
  const uintptr_t to = (reinterpret_cast<uintptr_t>(start) + bytes) / page * page;
  // Advice: when the kernel refuses, the pages simply stay resident until the arena is unmapped.
  return to <= from || os::discardMemory(reinterpret_cast<void*>(from), to - from) == 0;
}

uint64_t Arena::releaseSpare(uint64_t keepSpare) {
  const uint64_t used = carved_ > committedEnd_ ? carved_ : committedEnd_;
  const uint64_t wanted = used + (keepSpare < reserved_ - used ? keepSpare : reserved_ - used);
  uint64_t keep = roundUp(wanted, os::kTrackGranule);
  if (keep == 0) keep = os::kTrackGranule;
  if (keep >= reserved_ || os::unmapTail(base_, reserved_, keep) != 0) return 0;
  const uint64_t released = reserved_ - keep;
  reserved_ = keep;
  return released;
}

bool Arena::growReservation(uint64_t upTo) {
  const uint64_t wanted = roundUp(upTo, os::kTrackGranule);
  if (!os::extendMapping(base_, reserved_, wanted)) return false;
  reserved_ = wanted;
  return true;
}

void Arena::uncarve(uint64_t bytes) {
  carved_ -= bytes;
  if (committedEnd_ > carved_) committedEnd_ = roundUp(carved_, os::pageSize());
}

char* Arena::carve(uint64_t bytes, std::string* error, bool commit) {
  if (bytes > reserved_ - carved_ && !(options_.growInPlace && growReservation(carved_ + bytes))) {
    *error = "arena reservation exhausted";
    return nullptr;
  }
  if ((commit || options_.lock) && !commitUpTo(carved_ + bytes, error)) return nullptr;
  char* start = base_ + carved_;
  carved_ += bytes;
  TP_PROBE3(grow, bytes, carved_, reserved_);
  return start;
}

}  // namespace tp

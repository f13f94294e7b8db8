// One arena: a single mmap reservation from which blocks are carved front to back. What a plan names is
// pre-faulted (and locked, with `lock`) as it is carved, so serving it later takes no page fault; a block
// carved on demand may instead be left to fault in where it is first touched (Residency, DESIGN.md).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

namespace tp {

struct ArenaOptions {
  bool prefault = true;    // fault carved pages in at once
  bool hugePages = false;  // MADV_HUGEPAGE on the reservation (and 2 MiB alignment)
  bool lock = false;       // mlock carved pages (page-locked host memory)
  // Reserved where the address space past it is free (os::mapGrowable), and grown in place when a carve
  // needs more than is left (os::extendMapping): the process pool's default classes, which under an
  // RLIMIT_AS start small and grow as a heap does. Pre: mapping tracking is on (os::trackMappings).
  bool growInPlace = false;
};

// The message for an mlock of `bytes` refused with `err`: names RLIMIT_MEMLOCK, its soft limit and the fix.
std::string lockRefusal(uint64_t bytes, int err);

class Arena {
 public:
  // Reserves `reserveBytes` of address space and carves nothing yet. `commitBytes` (<= reserve) is the part
  // expected to be carved right away: it is pre-faulted / locked in one call instead of block by block.
  // Returns nullptr with a message in *error when the OS refuses (the message names RLIMIT_MEMLOCK and the
  // bytes asked when mlock is refused).
  static std::unique_ptr<Arena> create(uint64_t reserveBytes, uint64_t commitBytes, const ArenaOptions& options,
                                       std::string* error);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // Carves the next `bytes` (a multiple of 64) and returns their start, or nullptr when the reservation is
  // exhausted (and, growInPlace, cannot grow in place) or the OS refuses to fault / lock the new pages
  // (*error says which). Without `commit` the
  // pages are left unfaulted (unless the arena locks: locked memory is resident by contract), so a block
  // never written costs no memory.
  char* carve(uint64_t bytes, std::string* error, bool commit = true);

  // Faults the carved pages inside [start, start + bytes) in now, keeping their contents, while blocks there
  // may be in use by other threads: an arena built without pre-faulting (a switch's, made resident once the
  // arena it replaces gave its free pages back). False where the kernel cannot do it without writing them,
  // or refused: those pages then fault in where they are first touched. Pre: the range was carved.
  bool populateInUse(char* start, uint64_t bytes) const;

  // Gives the whole pages inside [start, start + bytes) back to the OS; a no-op for a locked arena (locked
  // pages stay resident by contract). Those pages read as zero afterwards; true when they do (none to give,
  // or the kernel took them), false when the arena is locked or the kernel refused. Pre: the range was carved.
  bool discard(char* start, uint64_t bytes) const;

  // Gives back the reservation past what was carved (or pre-faulted) plus `keepSpare` bytes, in whole
  // kTrackGranule steps and keeping at least one: address space nothing uses, which a lowered RLIMIT_AS
  // needs for the program's other mappings. Later carves stop at the new end (or grow it, growInPlace).
  // Returns the bytes given back.
  uint64_t releaseSpare(uint64_t keepSpare);
  // The last `bytes` carved are no longer used: carves start there again, and releaseSpare may give their
  // address space back. Pre: bytes <= carvedBytes(), and no block lies in them; not for an arena that
  // pre-faults or locks what it carves.
  void uncarve(uint64_t bytes);

  // Compares addresses as integers: the pointer may belong to any object, or to none.
  bool contains(const void* p) const {
    const uintptr_t at = reinterpret_cast<uintptr_t>(p), start = reinterpret_cast<uintptr_t>(base_);
    return at >= start && at - start < carved_;
  }
  char* base() const { return base_; }
  uint64_t reservedBytes() const { return reserved_; }
  uint64_t carvedBytes() const { return carved_; }
  // Bytes made resident (pre-faulted or locked) by the arena itself.
  uint64_t committedBytes() const { return committed_.load(std::memory_order_relaxed); }
  bool locked() const { return options_.lock; }

 private:
  Arena(char* base, uint64_t reserved, const ArenaOptions& options) : base_(base), reserved_(reserved), options_(options) {}
  // Pre-faults / locks [committedEnd_, upTo) rounded to pages, skipping what was carved uncommitted.
  bool commitUpTo(uint64_t upTo, std::string* error);
  // growInPlace: the reservation grown in place to hold `upTo` bytes, in whole granules. False where the
  // address space past it is taken or the OS refuses (RLIMIT_AS).
  bool growReservation(uint64_t upTo);

  char* base_;
  uint64_t reserved_;
  ArenaOptions options_;
  uint64_t carved_ = 0;
  mutable std::atomic<uint64_t> committed_{0};  // bytes pre-faulted / locked (populateInUse adds to it off the pool's lock)
  uint64_t committedEnd_ = 0;  // where the next commit starts: nothing below it is committed again
};

}  // namespace tp

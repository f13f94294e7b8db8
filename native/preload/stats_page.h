// The stats page: what `tensorpool stats PID` reads of a running process (lib/process/live-stats.ts), with no
// thread, socket or signal handler in the program and nothing done for it on an allocation's path.
//
// When the process pool is made, the library makes a page shared with readers (os/shared_page.h: a memfd
// named "tensorpool-stats", no descriptor kept open, read through /proc/PID/mem) and the pool keeps its counters there
// (PoolOptions::counters): they change as they always did, one store each under the pool's lock, and a reader
// sees them as they are. The figures the pool does not keep as it goes (the arenas' bytes, idle bytes: Pool::
// gauges) are published into the page at moments the program already spends in the library: when the pool
// is made, at iteration marks, at decay's turns (every 256 small mallocs of a thread, decay's thread, sleeps
// and waits), and at stats() from JS; at most every kPublishEveryNs (but before a sleep or wait, where
// anything changed), never waiting for the pool's lock. The
// table of blocks by size (`--by-size`) is worked out only when a reader asks: it adds one to the header's
// bySizeRequests (a write through /proc/PID/mem), which the next publication finds.
//
// Layout (version kStatsPageVersion; every integer little-endian, at its natural alignment):
//   StatsPageHeader at 0: magic, version, sizes and offsets of the rest, pid, settings;
//   the directory at header.directoryOffset: header.fieldCount entries {name[24], offset, kind}, the byte
//     offset of each uint64 field in the page; kind 0: a counter (updated live), 1: a gauge (in the block);
//   the counters (a PoolStats) at header.countersOffset;
//   the gauges block at header.gaugesOffset (header.gaugesBytes), between two publication numbers: one at its
//     start (`published`), one at its end (`publishing`). Publication n writes publishing = n, the block, then
//     published = n; a reader reads `published`, the block, then `publishing`, and has publication n whole
//     where both say n.
// The counters are read without such words (a store is all an update costs): each is an aligned 8-byte word
// written whole, and a reader takes a read in which allocs - releases = liveBlocks (no update under way).
#pragma once

#include <cstdint>

#include "core/pool.h"

namespace tp::preload {

constexpr uint32_t kStatsPageVersion = 2;
constexpr uint64_t kPublishEveryNs = 100'000'000;

// Makes this process's page, before its pool, naming its settings (this_process.h) and `decayMs` (PoolOptions::
// decayMs): returns where the pool keeps its counters (PoolOptions::counters), or nullptr where no page could
// be made (the pool then keeps them itself; nobody can read them).
PoolStats* makeStatsPage(uint64_t decayMs);
// The pool could not be made after all: the page goes.
void dropStatsPage();

enum class Publish : uint8_t {
  IfDue,      // where kPublishEveryNs has passed since the last publication, and the pool's lock is free
  IfChanged,  // where the pool served, released or gave back anything since, or a reader asked for the table
              // by size, and its lock is free (before the program sleeps or waits: what it leaves then is
              // what a reader sees meanwhile)
  Now,        // now, waiting for the pool's lock
};
// Publishes the pool's gauges, and the table by size where a reader asked for it. Runs inside the pool
// (InternalScope); errno as it was. Nothing without a page, or while another thread publishes.
void publishStats(Pool& pool, Publish when);

// fork(): the parent, holding the pool's lock, copies the page for its child (statsPageBeforeFork), then lets
// the copy go (statsPageAfterForkInParent). The child, before anything else touches the pool, gets a page of
// its own at the same address (statsPageInChild): the copy, else the page as it is now (a fork that did not
// take the pool's lock), its pid its own. Without it the child's pool would count in its parent's page.
void statsPageBeforeFork();
void statsPageAfterForkInParent();
void statsPageInChild();

}  // namespace tp::preload

// The line `tensorpool run --stats` (TENSORPOOL_STATS=1) prints as each process ends: the process pool's
// counters, named as processPool().stats() names them.
#pragma once

#include "this_process.h"

namespace tp {
class Pool;
}

namespace tp::preload {

// One line on stderr for this process: its pid, mode and threshold, then `pool`'s counters (nullptr: the pool was
// never made, and the line says so). Allocates (std::string): the caller catches std::bad_alloc.
void printStats(const ProcessSettings& settings, Pool* pool);

}  // namespace tp::preload

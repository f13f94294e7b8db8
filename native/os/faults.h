// Page-fault meters. The kernel counts every minor fault (a page mapped without I/O: first touch of
// anonymous memory, a page freed and faulted back) and major fault (a page read from disk); the pool's
// purpose is to take the minor ones out of the steady state, so we measure them directly.
#pragma once

#include <cstdint>

#include "os/os.h"

namespace tp {

enum class FaultSource : uint8_t { PerfEvent, ThreadUsage };

// Counts the faults of the thread that created it, from a perf_event software counter when the kernel allows
// one (exact, user-space faults only) and from getrusage(RUSAGE_THREAD) otherwise. Use it on one thread.
class FaultMeter {
 public:
  FaultMeter();
  ~FaultMeter();
  FaultMeter(const FaultMeter&) = delete;
  FaultMeter& operator=(const FaultMeter&) = delete;

  os::FaultCounts read() const;
  FaultSource source() const { return minorFd_ >= 0 ? FaultSource::PerfEvent : FaultSource::ThreadUsage; }

 private:
  int minorFd_ = -1;
  int majorFd_ = -1;
};

}  // namespace tp

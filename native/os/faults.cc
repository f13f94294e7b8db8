#include "os/faults.h"

namespace tp {

FaultMeter::FaultMeter() {
  minorFd_ = os::openFaultCounter(false);
  if (minorFd_ < 0) return;
  majorFd_ = os::openFaultCounter(true);
  if (majorFd_ < 0) {  // both from one source or neither: never mix perf and rusage numbers
    os::closeCounter(minorFd_);
    minorFd_ = -1;
  }
}

FaultMeter::~FaultMeter() {
  os::closeCounter(minorFd_);
  os::closeCounter(majorFd_);
}

os::FaultCounts FaultMeter::read() const {
  if (minorFd_ < 0) return os::threadFaults();
  os::FaultCounts counts;
  if (os::readCounter(minorFd_, &counts.minor) != 0 || os::readCounter(majorFd_, &counts.major) != 0) {
    return os::threadFaults();
  }
  return counts;
}

}  // namespace tp

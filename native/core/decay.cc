#include "core/decay.h"

#include <algorithm>

namespace tp {

namespace {
constexpr uint64_t kNsPerMs = 1000000;
}  // namespace

uint64_t DecayModel::periodMs() const {
  if (!on()) return kNever;
  return periodMs_ > kNever / kNsPerMs / scale_ ? kNever / kNsPerMs : periodMs_ * scale_;
}

uint64_t DecayModel::scaledPeriodNs() const {
  const uint64_t ms = periodMs();
  return ms > kNever / kNsPerMs ? kNever : ms * kNsPerMs;
}

void DecayModel::mark(uint64_t now, bool first) {
  if (!first) longestIteration_ = std::max(longestIteration_, now - lastMark_);
  lastMark_ = now;
  epochMarks_++;
}

bool DecayModel::epochEnded(uint64_t now) const {
  const uint64_t marksStopped = std::max(periodNs_, longestIteration_ > kNever / 2 ? kNever : 2 * longestIteration_);
  return periodPassed(now) && (epochMarks_ >= kMarks * scale_ || now - lastMark_ >= marksStopped);
}

void DecayModel::startEpoch(uint64_t now, bool rewarmed) {
  if (rewarmed) {
    scale_ = std::min(scale_ * 2, kMaxScale);
    quietEpochs_ = 0;
  } else if (++quietEpochs_ >= kQuietEpochs) {
    scale_ = std::max<uint64_t>(1, scale_ / 2);
    quietEpochs_ = 0;
  }
  periodNs_ = scaledPeriodNs();
  epochStart_ = now;
  epochMarks_ = 0;
}

}  // namespace tp

#include "core/recorder.h"

#include <algorithm>

#include "os/os.h"

namespace tp {

void Recorder::start(uint64_t limit) {
  limit_ = limit;
  truncated_ = false;
  on_ = true;
}

uint64_t Recorder::streamNumber(const void* stream) {
  auto at = std::find(streams_.begin(), streams_.end(), stream);
  if (at == streams_.end()) {
    streams_.push_back(stream);
    return streams_.size();
  }
  return static_cast<uint64_t>(at - streams_.begin()) + 1;
}

uint64_t Recorder::threadNumber() {
  const pthread_t self = pthread_self();
  for (const auto& [thread, number] : threads_) {
    if (pthread_equal(thread, self)) return number;
  }
  const uint64_t number = os::isMainThread() ? 0 : std::min(nextThread_++, RecordedEvent::kMaxThread);
  threads_.emplace_back(self, number);
  return number;
}

const RecordedEvent* Recorder::from(uint64_t number, size_t* count) const {
  const uint64_t first = std::clamp(number, base_, end());
  *count = static_cast<size_t>(end() - first);
  return events_.data() + (first - base_);
}

void Recorder::discard(uint64_t number) {
  const uint64_t upTo = std::clamp(number, base_, end());
  events_.erase(events_.begin(), events_.begin() + static_cast<std::ptrdiff_t>(upTo - base_));
  base_ = upTo;
}

}  // namespace tp

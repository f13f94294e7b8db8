// Pool's recording of the events it serves (core/recorder.h).
#include "core/pool.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "core/arena.h"
#include "os/os.h"

namespace tp {

void Pool::recordReleaseLocked(uint64_t serial, const FenceQueue* stream) {
  if (recorder_.on()) recorder_.release(serial, stream ? recorder_.streamNumber(stream) : 0);
}

void Pool::startRecording(uint64_t limit) {
  const Locked lock(*this);
  recorder_.start(limit);
  updateQueueableLocked();
}

void Pool::stopRecording() {
  const Locked lock(*this);
  recorder_.stop();
  updateQueueableLocked();
}

RecordingState Pool::recordingState() const {
  const Locked lock(*this);
  return {recorder_.on(), recorder_.truncated(), recorder_.begin(), recorder_.end()};
}

std::vector<RecordedEvent> Pool::copyRecording(uint64_t from) const {
  const Locked lock(*this);
  size_t count;
  const RecordedEvent* events = recorder_.from(from, &count);
  return std::vector<RecordedEvent>(events, events + count);
}

void Pool::visitRecording(uint64_t from, RecordingVisit visit, void* context) const {
  const Locked lock(*this);
  size_t count;
  const RecordedEvent* events = recorder_.from(from, &count);
  visit(events, count, {recorder_.on(), recorder_.truncated(), recorder_.begin(), recorder_.end()}, context);
}

void Pool::discardRecording(uint64_t before) {
  const Locked lock(*this);
  recorder_.discard(before);
}

}  // namespace tp

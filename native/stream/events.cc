#include "stream/events.h"

namespace tp {

EventPool::~EventPool() {
  while (free_) {
    StreamEvent* next = free_->next;
    delete free_;
    free_ = next;
  }
}

StreamEvent* EventPool::record(const std::shared_ptr<Stream>& stream) {
  StreamEvent* event;
  if (free_) {
    event = free_;
    free_ = event->next;
    ++reused_;
  } else {
    event = new StreamEvent();
    ++created_;
  }
  event->stream = stream;
  event->sequence = stream->recorded();
  event->next = nullptr;
  return event;
}

void EventPool::recycle(StreamEvent* event) {
  event->stream.reset();
  if (!pooling_) {
    delete event;
    return;
  }
  event->next = free_;
  free_ = event;
}

}  // namespace tp

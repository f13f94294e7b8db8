#include "core/event_pool.h"

namespace tp {

EventPool::~EventPool() {
  while (free_) {
    StreamEvent* next = free_->next;
    delete free_;
    free_ = next;
  }
}

StreamEvent* EventPool::record(const std::shared_ptr<FenceQueue>& queue) {
  StreamEvent* event;
  if (free_) {
    event = free_;
    free_ = event->next;
    ++reused_;
  } else {
    event = new StreamEvent();
    ++created_;
  }
  event->queue = queue;
  event->sequence = queue->recorded();
  event->next = nullptr;
  return event;
}

void EventPool::recycle(StreamEvent* event) {
  event->queue.reset();
  if (!pooling_) {
    delete event;
    return;
  }
  event->next = free_;
  free_ = event;
}

}  // namespace tp

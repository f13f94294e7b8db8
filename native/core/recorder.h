// Recording (issue: online training): the allocations and releases a pool serves, and the iteration marks,
// appended to one vector under the pool's lock, so a recorded run costs no JS work per event. lib/ turns
// the events into a Trace (lib/plan/recording.ts).
#pragma once

#include <cstddef>
#include <pthread.h>

#include <cstdint>
#include <vector>

namespace tp {

enum class RecordedOp : uint8_t { Alloc = 0, Release = 1, Mark = 2 };

// 16 bytes: the allocation's serial number (which names the buffer: a release carries the serial of the
// allocation it ends), and the size and thread of an allocation or the stream of a stream-ordered release.
struct RecordedEvent {
  static constexpr unsigned kThreadShift = 48;  // a request is at most 2^47 bytes: 48 bits hold it
  static constexpr uint64_t kMaxThread = (uint64_t{1} << (62 - kThreadShift)) - 1;

  uint64_t serial;
  // op in the top 2 bits; below them: for an alloc the thread number (bits 48-61) and the bytes (bits 0-47),
  // for a release the stream number or 0.
  uint64_t value;

  RecordedOp op() const { return static_cast<RecordedOp>(value >> 62); }
  uint64_t payload() const { return value & ((uint64_t{1} << 62) - 1); }
  uint64_t bytes() const { return value & ((uint64_t{1} << kThreadShift) - 1); }  // of an alloc
  uint64_t thread() const { return payload() >> kThreadShift; }                     // of an alloc
};

class Recorder {
 public:
  // Events are numbered from the first one recorded since the pool was made; discard() drops old ones but
  // never renumbers. At most `limit` events are held: once full, recording stops and truncated() says so.
  void start(uint64_t limit);
  void stop() { on_ = false; }
  bool on() const { return on_; }

  void alloc(uint64_t serial, uint64_t bytes) {
    if (on_) push(serial, (uint64_t{0} << 62) | threadNumber() << RecordedEvent::kThreadShift | bytes);
  }
  // `stream`: 0 for a plain release, else the stream's number (streamNumber()).
  void release(uint64_t serial, uint64_t stream) { push(serial, (uint64_t{1} << 62) | stream); }
  void mark() { push(0, uint64_t{2} << 62); }

  // A small number for a stream, stable for this recorder's life: 1 for the first stream seen, 2 for the
  // next, ... The pointer is only compared, never followed.
  uint64_t streamNumber(const void* stream);
  // The calling thread's number, stable for this recorder's life: 0 for the process's main thread, then 1,
  // 2, ... in the order other threads first allocate while recording (at most RecordedEvent::kMaxThread;
  // later threads share it). A thread that exits and one that takes its pthread_t share a number.
  uint64_t threadNumber();

  uint64_t begin() const { return base_; }                  // number of the oldest event held
  uint64_t end() const { return base_ + events_.size(); }   // number the next event will get
  bool truncated() const { return truncated_; }
  // Events [from, end()) with from clamped to what is held.
  const RecordedEvent* from(uint64_t number, size_t* count) const;
  // Drops the events numbered below `number`.
  void discard(uint64_t number);

 private:
  void push(uint64_t serial, uint64_t value) {
    if (!on_) return;
    if (events_.size() >= limit_) {
      on_ = false;
      truncated_ = true;
      return;
    }
    events_.push_back({serial, value});
  }

  bool on_ = false;
  bool truncated_ = false;
  uint64_t limit_ = 0;
  uint64_t base_ = 0;
  std::vector<RecordedEvent> events_;
  std::vector<const void*> streams_;
  std::vector<std::pair<pthread_t, uint64_t>> threads_;
  uint64_t nextThread_ = 1;
};

}  // namespace tp

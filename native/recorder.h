// Recording (issue: online training): the allocations and releases a pool serves, and the iteration marks,
// appended to one vector under the pool's lock, so a recorded run costs no JS work per event. lib/ turns
// the events into a Trace (lib/recording.ts).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tp {

enum class RecordedOp : uint8_t { Alloc = 0, Release = 1, Mark = 2 };

// 16 bytes: the allocation's serial number (which names the buffer: a release carries the serial of the
// allocation it ends), and the size of an allocation or the stream of a stream-ordered release.
struct RecordedEvent {
  uint64_t serial;
  uint64_t value;  // op in the top 2 bits; below them: bytes (alloc), stream number + 1 or 0 (release)

  RecordedOp op() const { return static_cast<RecordedOp>(value >> 62); }
  uint64_t payload() const { return value & ((uint64_t{1} << 62) - 1); }
};

class Recorder {
 public:
  // Events are numbered from the first one recorded since the pool was made; discard() drops old ones but
  // never renumbers. At most `limit` events are held: once full, recording stops and truncated() says so.
  void start(uint64_t limit);
  void stop() { on_ = false; }
  bool on() const { return on_; }

  void alloc(uint64_t serial, uint64_t bytes) { push(serial, (uint64_t{0} << 62) | bytes); }
  // `stream`: 0 for a plain release, else the stream's number (streamNumber()).
  void release(uint64_t serial, uint64_t stream) { push(serial, (uint64_t{1} << 62) | stream); }
  void mark() { push(0, uint64_t{2} << 62); }

  // A small number for a stream, stable for this recorder's life: 1 for the first stream seen, 2 for the
  // next, ... The pointer is only compared, never followed.
  uint64_t streamNumber(const void* stream);

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
};

}  // namespace tp

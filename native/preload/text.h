// Text built in a buffer the caller owns, with no heap: for what the library writes where the C library's
// malloc may not be called (at _exit, in a signal handler) or must not be (before the pool is set up).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace tp::preload {

// Appends to buffer[capacity], always NUL-terminated; what does not fit is cut, and overflowed() says so.
class Text {
 public:
  Text(char* buffer, size_t capacity) : buffer_(buffer), capacity_(capacity) {
    if (capacity_) buffer_[0] = '\0';
  }
  Text& add(const char* text) { return add(text, strlen(text)); }
  Text& add(const char* text, size_t length) {
    for (size_t i = 0; i < length; ++i) put(text[i]);
    return terminated();
  }
  Text& add(uint64_t value) {
    char digits[20];
    size_t n = 0;
    do digits[n++] = static_cast<char>('0' + value % 10);
    while ((value /= 10) != 0);
    while (n) put(digits[--n]);
    return terminated();
  }
  Text& add(char c) {
    put(c);
    return terminated();
  }
  const char* data() const { return buffer_; }
  size_t size() const { return size_; }
  bool overflowed() const { return overflowed_; }
  void clear() {
    size_ = 0;
    overflowed_ = false;
    terminated();
  }

 private:
  void put(char c) {
    if (size_ + 1 < capacity_) buffer_[size_++] = c;
    else overflowed_ = true;
  }
  Text& terminated() {
    if (capacity_) buffer_[size_] = '\0';
    return *this;
  }

  char* buffer_;
  size_t capacity_;
  size_t size_ = 0;
  bool overflowed_ = false;
};

// Copies `text` into out[capacity]; false (out holding as much as fits) when it does not fit.
inline bool copyText(char* out, size_t capacity, const char* text) {
  Text copy(out, capacity);
  return !copy.add(text).overflowed();
}

}  // namespace tp::preload

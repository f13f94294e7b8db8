// What a fuzz target does when a property fails: print which check failed (with two numbers for context) and
// abort, so that libFuzzer saves the input.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace tpfuzz {

[[noreturn]] inline void fail(const char* what, uint64_t a = 0, uint64_t b = 0) {
  std::fprintf(stderr, "fuzz check failed: %s (%llu, %llu)\n", what, static_cast<unsigned long long>(a),
               static_cast<unsigned long long>(b));
  std::abort();
}

}  // namespace tpfuzz

#define EXPECT(cond, ...)                              \
  do {                                                 \
    if (!(cond)) ::tpfuzz::fail(#cond, ##__VA_ARGS__); \
  } while (0)

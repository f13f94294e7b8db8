// A minimal test harness for the native unit tests: TEST registers a case, CHECK stops the run at the first
// failure with file and line. `tp_native_tests [substring]` runs the cases whose name contains substring.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace tpt {

struct Case {
  const char* name;
  void (*run)();
};

inline std::vector<Case>& cases() {
  static std::vector<Case> all;
  return all;
}

struct Register {
  Register(const char* name, void (*run)()) { cases().push_back({name, run}); }
};

[[noreturn]] inline void fail(const char* file, int line, const char* what) {
  std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", file, line, what);
  std::exit(1);
}

}  // namespace tpt

#define TEST(name)                                      \
  static void name();                                   \
  static ::tpt::Register register_##name(#name, name);  \
  static void name()

#define CHECK(cond)                                  \
  do {                                               \
    if (!(cond)) ::tpt::fail(__FILE__, __LINE__, #cond); \
  } while (0)

#include <cstring>

#include "check.h"

int main(int argc, char** argv) {
  const char* filter = argc > 1 ? argv[1] : "";
  int ran = 0;
  for (const tpt::Case& c : tpt::cases()) {
    if (!std::strstr(c.name, filter)) continue;
    std::fprintf(stderr, "- %s\n", c.name);
    c.run();
    ++ran;
  }
  std::fprintf(stderr, "%d native test cases passed\n", ran);
  return ran > 0 ? 0 : 1;
}

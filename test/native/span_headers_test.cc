// Native tests of the spans' header index (SpanHeaders): over random obtains, finds and erases it agrees with
// a std::map, a header keeps its address while it is indexed, and an erased start is never found again.
#include <map>
#include <random>
#include <vector>

#include "check.h"
#include "core/span_headers.h"

using namespace tp;

TEST(span_headers_agree_with_a_map_over_random_obtains_finds_and_erases_and_headers_never_move) {
  SpanHeaders index;
  std::map<uintptr_t, BlockHeader*> model;  // start -> the header obtain() gave
  std::mt19937_64 random(11);
  // Starts from a narrow range, 64-byte aligned as spans' are: keys collide, probes wrap around the table's
  // end, and erases shift whole runs of entries back.
  const auto pickStart = [&](uint64_t range) { return uintptr_t{1} << 20 | (random() % range) << 6; };
  for (int step = 0; step < 200000; ++step) {
    // Phases of growth and of shrinking, so that the table grows several times and empties again.
    const uint64_t range = step % 50000 < 25000 ? 4096 : 512;
    const uintptr_t start = pickStart(range);
    const unsigned op = static_cast<unsigned>(random() % 8);
    if (op < 3) {
      BlockHeader* header = index.obtain(start);
      const auto known = model.find(start);
      if (known != model.end()) {
        CHECK(header == known->second);  // the same header, where it was
      } else {
        CHECK(header->check == 0 && header->capacity == 0 && header->span == 0);  // reads as BlockHeader{}
        model.emplace(start, header);
      }
      header->check = start;  // what the header holds stays with it
    } else if (op < 6 || model.size() > 2000) {
      index.erase(start);
      model.erase(start);
    } else {
      BlockHeader* header = index.find(start);
      const auto known = model.find(start);
      CHECK(header == (known == model.end() ? nullptr : known->second));
      if (header) CHECK(header->check == start);
    }
    CHECK(index.size() == model.size() && index.empty() == model.empty());
    if (step % 1000 == 0) {  // every entry still found, each at its own header
      for (const auto& [at, header] : model) CHECK(index.find(at) == header && header->check == at);
    }
  }
  for (const auto& [at, header] : model) index.erase(at);
  CHECK(index.empty() && index.find(pickStart(4096)) == nullptr);
}

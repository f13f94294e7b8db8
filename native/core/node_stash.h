// Nodes taken out of a node-based standard container (std::map, std::set, std::unordered_map), kept for the
// next insert. The span heap's indexes remove a node and insert another on most
// takes and gives; under the pool's lock each of those went to the C library (and through its lock) where a
// kept node costs nothing. At most N are kept: the rest are freed as the container frees them.
#pragma once

#include <cstddef>
#include <utility>

namespace tp {

template <typename Container, size_t N>
class NodeStash {
 public:
  using Node = typename Container::node_type;

  // Removes `at` from `container`, keeping its node while there is room. Never throws (extract and erase do not).
  void erase(Container& container, typename Container::iterator at) {
    if (count_ < N) {
      nodes_[count_++] = container.extract(at);
    } else {
      container.erase(at);
    }
  }

  bool empty() const { return count_ == 0; }

  // A kept node, for the caller to fill and insert. Pre: !empty().
  Node take() { return std::move(nodes_[--count_]); }

 private:
  Node nodes_[N];
  size_t count_ = 0;
};

}  // namespace tp

// Nodes of the span heap's trees (std::map, under the pool's lock), one 64-byte line each, carved from chunks
// the heap owns and kept on a free list when erased. A tree walk then reads one line a level, where the C
// library's chunks (a node plus 16 bytes, 16-byte aligned) often straddled two, and nodes lie
// together rather than among the program's own small allocations. No node goes back to the C library (or
// through its lock) before the heap does: it holds the lines its most numerous free spans needed (two a
// span: one in each index, 128 bytes for spans that are mostly 64 KiB or more).
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <vector>

namespace tp {

class NodeSlab {
 public:
  NodeSlab() = default;
  NodeSlab(const NodeSlab&) = delete;
  NodeSlab& operator=(const NodeSlab&) = delete;

  static constexpr size_t kNodeBytes = 64;

  // A line for a node. Throws std::bad_alloc where a chunk cannot be added.
  void* take() {
    if (!free_) addChunk();
    Line* line = free_;
    free_ = line->next;
    return line;
  }
  // Pre: `node` came from take() of this slab and is not in use.
  void give(void* node) noexcept {
    free_ = new (node) Line{free_};
  }

 private:
  struct alignas(kNodeBytes) Line {
    Line* next;
  };
  static constexpr size_t kChunkLines = 64;  // 4 KiB

  void addChunk() {
    chunks_.reserve(chunks_.size() + 1);  // push_back below then cannot throw
    std::unique_ptr<Line[]> chunk(new Line[kChunkLines]);
    for (size_t i = 0; i < kChunkLines; ++i) chunk[i].next = i + 1 < kChunkLines ? &chunk[i + 1] : free_;
    free_ = &chunk[0];
    chunks_.push_back(std::move(chunk));
  }

  std::vector<std::unique_ptr<Line[]>> chunks_;
  Line* free_ = nullptr;
};

// The allocator of a container whose every allocation is one node of at most NodeSlab::kNodeBytes.
template <typename T>
class SlabAllocator {
 public:
  using value_type = T;
  explicit SlabAllocator(NodeSlab* slab) : slab_(slab) {}
  template <typename U>
  SlabAllocator(const SlabAllocator<U>& other) : slab_(other.slab()) {}  // NOLINT: rebinding converts implicitly

  T* allocate(size_t n) {
    static_assert(sizeof(T) <= NodeSlab::kNodeBytes && alignof(T) <= NodeSlab::kNodeBytes, "a node fits one line");
    if (n != 1) throw std::bad_alloc();
    return static_cast<T*>(slab_->take());
  }
  void deallocate(T* node, size_t) noexcept { slab_->give(node); }
  NodeSlab* slab() const { return slab_; }
  template <typename U>
  bool operator==(const SlabAllocator<U>& other) const { return slab_ == other.slab(); }
  template <typename U>
  bool operator!=(const SlabAllocator<U>& other) const { return slab_ != other.slab(); }

 private:
  NodeSlab* slab_;
};

}  // namespace tp

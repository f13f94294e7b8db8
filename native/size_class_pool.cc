#include "size_class_pool.h"

namespace tp {

// No pool is planned beyond 128 TiB: the x86-64 user address space.
constexpr uint64_t kMaxArenaBytes = uint64_t{1} << 47;

std::unique_ptr<SizeClassPool> SizeClassPool::create(uint32_t id, uint64_t secret, const PlanSpec& plan,
                                                     const ArenaOptions& arenaOptions, Growth growth,
                                                     uint64_t extraReserve, std::string* error) {
  std::unique_ptr<SizeClassPool> pool(new SizeClassPool());
  if (!pool->table_.build(plan, error)) return nullptr;

  uint64_t planned = 0;
  for (const PlanClass& c : plan.classes) {
    const uint64_t stride = strideOf(c.size);
    if (c.blocks > (kMaxArenaBytes - planned) / stride) {
      *error = "the plan needs more than 128 TiB (class of " + std::to_string(c.size) + " bytes, " +
               std::to_string(c.blocks) + " blocks)";
      return nullptr;
    }
    planned += stride * c.blocks;
  }
  const uint64_t extra = growth != Growth::Off ? extraReserve : 0;
  if (extra > kMaxArenaBytes - planned) {
    *error = "the reservation exceeds 128 TiB";
    return nullptr;
  }

  pool->id_ = id;
  pool->secret_ = secret;
  pool->schedule_ = plan.schedule;
  pool->growth_ = growth;
  pool->arena_ = Arena::create(planned + extra, planned, arenaOptions, error);
  if (!pool->arena_) return nullptr;

  const size_t classes = pool->table_.count();
  pool->heads_.assign(classes, nullptr);
  pool->nonEmpty_.assign((classes + 63) / 64, 0);
  pool->counters_.assign(classes, ClassCounters{});
  for (const PlanClass& c : plan.classes) {
    const size_t cls = static_cast<size_t>(pool->table_.firstFitting(c.size));
    for (uint64_t b = 0; b < c.blocks; ++b) {
      BlockHeader* header = pool->carveBlock(cls, error);
      if (!header) return nullptr;  // cannot happen: the arena was sized for every planned block
      pool->push(cls, header);
    }
  }
  return pool;
}

BlockHeader* SizeClassPool::carveBlock(size_t cls, std::string* error) {
  const uint64_t stride = strideOf(table_.size(cls));
  char* start = arena_->carve(stride, error);
  if (!start) return nullptr;
  BlockHeader* header = reinterpret_cast<BlockHeader*>(start);
  *header = BlockHeader{};
  header->check = secret_ ^ reinterpret_cast<uintptr_t>(header);
  header->origin = Origin::Arena;
  header->state = BlockState::Free;
  header->classIndex = static_cast<uint16_t>(cls);
  header->arenaId = id_;
  header->capacity = stride - kHeaderBytes;
  counters_[cls].blocks++;
  return header;
}

void SizeClassPool::push(size_t cls, BlockHeader* header) {
  header->next = heads_[cls];
  heads_[cls] = header;
  nonEmpty_[cls / 64] |= uint64_t{1} << (cls % 64);
  counters_[cls].freeBlocks++;
}

BlockHeader* SizeClassPool::pop(size_t cls) {
  BlockHeader* header = heads_[cls];
  heads_[cls] = header->next;
  header->next = nullptr;
  if (!heads_[cls]) nonEmpty_[cls / 64] &= ~(uint64_t{1} << (cls % 64));
  counters_[cls].freeBlocks--;
  return header;
}

int SizeClassPool::firstNonEmpty(size_t from) const {
  for (size_t word = from / 64; word < nonEmpty_.size(); ++word) {
    uint64_t bits = nonEmpty_[word];
    if (word == from / 64) bits &= ~uint64_t{0} << (from % 64);
    if (bits) return static_cast<int>(word * 64 + static_cast<size_t>(__builtin_ctzll(bits)));
  }
  return -1;
}

BlockHeader* SizeClassPool::take(uint64_t bytes, Source* source) {
  const int home = table_.firstFitting(bytes);
  if (home < 0) return nullptr;
  const size_t first = static_cast<size_t>(home);
  const bool ownExists = table_.isOwn(first, bytes);

  if (ownExists && heads_[first]) {
    BlockHeader* header = pop(first);
    counters_[first].hits++;
    *source = Source::Own;
    return markLive(header, bytes);
  }
  const bool growFirst = ownExists && growth_ == Growth::BeforeBorrowing;
  if (growFirst) {
    if (BlockHeader* header = grow(first, true, source)) return markLive(header, bytes);
  }
  if (const int lender = firstNonEmpty(ownExists ? first + 1 : first); lender >= 0) {
    BlockHeader* header = pop(static_cast<size_t>(lender));
    counters_[lender].lent++;
    *source = Source::Borrowed;
    return markLive(header, bytes);
  }
  // Nothing free fits. (Growing before this, a class with no own class would grow while a block of the
  // smallest fitting class lay free: without bound.)
  if (growth_ != Growth::Off && !growFirst) {
    if (BlockHeader* header = grow(first, ownExists, source)) return markLive(header, bytes);
  }
  return nullptr;
}

BlockHeader* SizeClassPool::grow(size_t cls, bool own, Source* source) {
  BlockHeader* header = carveBlock(cls, &lastGrowError_);
  if (!header) return nullptr;
  counters_[cls].grown++;
  if (own) counters_[cls].hits++; else counters_[cls].lent++;
  *source = own ? Source::Grown : Source::GrownLent;
  return header;
}

BlockHeader* SizeClassPool::takeFrom(size_t cls, uint64_t bytes, Source* source) {
  if (!heads_[cls]) return nullptr;
  BlockHeader* header = pop(cls);
  if (table_.isOwn(cls, bytes)) {
    counters_[cls].hits++;
    *source = Source::Own;
  } else {
    counters_[cls].lent++;
    *source = Source::Borrowed;
  }
  return markLive(header, bytes);
}

BlockHeader* SizeClassPool::markLive(BlockHeader* header, uint64_t bytes) {
  header->state = BlockState::Live;
  header->requested = bytes;
  header->lent = table_.isOwn(header->classIndex, bytes) ? 0 : 1;
  outstanding_++;
  return header;
}

void SizeClassPool::give(BlockHeader* header) {
  header->state = BlockState::Free;
  header->requested = 0;
  header->lent = 0;
  outstanding_--;
  if (retired_) arena_->discard(header->data(), header->capacity);
  push(header->classIndex, header);
}

void SizeClassPool::retire(bool discardFree) {
  retired_ = true;
  if (!discardFree) return;
  for (const auto& [start, bytes] : freeRanges()) arena_->discard(start, bytes);
}

std::vector<std::pair<char*, uint64_t>> SizeClassPool::freeRanges() const {
  std::vector<std::pair<char*, uint64_t>> ranges;
  for (BlockHeader* head : heads_) {
    for (BlockHeader* header = head; header; header = header->next) ranges.emplace_back(header->data(), header->capacity);
  }
  return ranges;
}

BlockHeader* SizeClassPool::headerOf(const void* data) const {
  const uintptr_t at = reinterpret_cast<uintptr_t>(data);
  const uintptr_t base = reinterpret_cast<uintptr_t>(arena_->base());
  if (!arena_->contains(data) || at - base < kHeaderBytes || (at - base) % kBlockAlign != 0) return nullptr;
  BlockHeader* header = reinterpret_cast<BlockHeader*>(at - kHeaderBytes);
  return header->check == (secret_ ^ reinterpret_cast<uintptr_t>(header)) ? header : nullptr;
}

}  // namespace tp

// SizeClassPool's time-shared blocks (a plan with a layout): records out of line, free lists of records, and
// a block handed out only while no block sharing its memory is live (core/size_class_pool.h).
#include "core/size_class_pool.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "os/os.h"

namespace tp {

bool SizeClassPool::placeLayout(const PlanSpec& plan, uint64_t height, std::string* error) {
  char* base = arena_->carve(height, error);
  if (!base) return false;
  const size_t count = plan.layout.size();
  records_.reserve(count);
  for (const PlacedBlock& block : plan.layout) {
    addRecord(reinterpret_cast<BlockHeader*>(base + block.offset), block.classIndex);
    counters_[block.classIndex].blocks++;
  }
  layoutBlocks_ = static_cast<uint32_t>(count);
  // Blocks sorted by offset: block i shares memory with the blocks after it that start before it ends.
  std::vector<uint32_t> byOffset(count);
  for (uint32_t i = 0; i < count; ++i) byOffset[i] = i;
  std::sort(byOffset.begin(), byOffset.end(),
            [&](uint32_t a, uint32_t b) { return plan.layout[a].offset < plan.layout[b].offset; });
  std::vector<std::vector<uint32_t>> sharing(count);
  for (size_t i = 0; i < count; ++i) {
    const uint32_t a = byOffset[i];
    const uint64_t end = plan.layout[a].offset + strideOf(table_.size(plan.layout[a].classIndex));
    for (size_t j = i + 1; j < count && plan.layout[byOffset[j]].offset < end; ++j) {
      sharing[a].push_back(byOffset[j]);
      sharing[byOffset[j]].push_back(a);
    }
  }
  for (uint32_t r = 0; r < count; ++r) {
    std::sort(sharing[r].begin(), sharing[r].end());
    std::vector<SharerWord> words;
    for (uint32_t sharer : sharing[r]) {
      if (words.empty() || words.back().word != sharer / 64) words.push_back({0, sharer / 64});
      words.back().mask |= uint64_t{1} << (sharer % 64);
    }
    Record& record = records_[r];
    const size_t nearCount = std::min(words.size(), std::size(record.near));
    std::copy(words.begin(), words.begin() + nearCount, record.near);
    record.sharersBegin = static_cast<uint32_t>(sharerWords_.size());
    sharerWords_.insert(sharerWords_.end(), words.begin() + nearCount, words.end());
    record.sharersEnd = static_cast<uint32_t>(sharerWords_.size());
    pushRecord(r, record.classIndex);
  }
  schedules_.markKeeps(sharing);
  return true;
}

uint32_t SizeClassPool::addRecord(BlockHeader* header, size_t cls) {
  Record record;
  record.header = header;
  record.classIndex = static_cast<uint32_t>(cls);
  record.sharersBegin = record.sharersEnd = static_cast<uint32_t>(sharerWords_.size());
  records_.push_back(record);
  const uint32_t r = static_cast<uint32_t>(records_.size() - 1);
  liveBits_.resize(r / 64 + 1, 0);
  setLiveBit(r, true);  // a block is carved to be handed out, or pushed free by its creator
  return r;
}

void SizeClassPool::setLiveBit(uint32_t r, bool live) {
  const uint64_t bit = uint64_t{1} << (r % 64);
  if (live) liveBits_[r / 64] |= bit; else liveBits_[r / 64] &= ~bit;
}

bool SizeClassPool::available(uint32_t r) const {
  if (isLive(r)) return false;
  const Record& record = records_[r];
  // The near words are tested unconditionally: an unused one has an empty mask.
  if ((liveBits_[record.near[0].word] & record.near[0].mask) | (liveBits_[record.near[1].word] & record.near[1].mask)) {
    return false;
  }
  for (uint32_t i = record.sharersBegin; i < record.sharersEnd; ++i) {
    if (liveBits_[sharerWords_[i].word] & sharerWords_[i].mask) return false;
  }
  return true;
}

void SizeClassPool::countTakenShared(size_t cls) {
  if (--counters_[cls].freeBlocks == 0) setNonEmpty(cls, false);
}

uint32_t SizeClassPool::takeAvailable(size_t cls, bool grown) {
  // Bounded: a class whose first free blocks all lie under live ones is treated as busy, not searched.
  constexpr int kSteps = 8;
  uint32_t r = (grown ? grownHeads_ : recordHeads_)[cls];
  for (int step = 0; r != kNoRecord && step < kSteps;) {
    const uint32_t next = records_[r].next;
    if (isLive(r)) {
      unlink(r);  // taken by its schedule since it was listed
    } else if (available(r)) {
      unlink(r);
      countTakenShared(cls);
      records_[r].header->slot = r;  // an available block's memory is no one's: its header may be written
      return r;
    } else {
      ++step;
    }
    r = next;
  }
  return kNoRecord;
}

void SizeClassPool::link(uint32_t r) {
  Record& record = records_[r];
  uint32_t& head = listHead(r);
  record.prev = kNoRecord;
  record.next = head;
  record.listed = true;
  if (head != kNoRecord) records_[head].prev = r;
  head = r;
}

void SizeClassPool::unlink(uint32_t r) {
  Record& record = records_[r];
  uint32_t& head = listHead(r);
  if (record.prev != kNoRecord) records_[record.prev].next = record.next; else head = record.next;
  if (record.next != kNoRecord) records_[record.next].prev = record.prev;
  record.prev = record.next = kNoRecord;
  record.listed = false;
}

void SizeClassPool::pushRecord(uint32_t r, size_t cls) {
  counters_[cls].freeBlocks++;
  setNonEmpty(cls, true);
  setLiveBit(r, false);
  if (!records_[r].listed) link(r);  // still listed when its schedule took it and no walk came by since
}

int SizeClassPool::cachedBlocking(uint32_t block) const {
  // A live block's header is intact: no other block's data covers it while it is live.
  const auto cached = [&](uint32_t r) { return isLive(r) && records_[r].header->state == BlockState::Cached; };
  if (isLive(block)) return cached(block) ? static_cast<int>(records_[block].classIndex) : -1;
  int smallest = -1;
  forEachSharer(records_[block], [&](uint32_t s) {
    if (cached(s) && (smallest < 0 || records_[s].classIndex < static_cast<uint32_t>(smallest))) smallest = static_cast<int>(records_[s].classIndex);
  });
  return smallest;
}

BlockHeader* SizeClassPool::takeBlock(uint32_t block, uint64_t bytes, Source* source) {
  if (isLive(block)) return nullptr;
  const Record& record = records_[block];
  const size_t cls = record.classIndex;
  if (!available(block)) {
    counters_[cls].busy++;
    return nullptr;
  }
  countTakenShared(cls);  // it stays listed: a walk of the list unlinks it if still live
  *source = countServed(cls, markRecordLive(block, bytes));
  return record.header;
}

bool SizeClassPool::markRecordLive(uint32_t r, uint64_t bytes) {
  // Written whole from what the record holds, never read back: the header may have been another block's
  // data while it was free, and a load from its line would wait for that line.
  const bool lent = writeHeader(records_[r].header, records_[r].classIndex, r, BlockState::Live, bytes);
  setLiveBit(r, true);
  outstanding_++;
  countOutstanding(capacityOf(records_[r].classIndex));
  return lent;
}

}  // namespace tp

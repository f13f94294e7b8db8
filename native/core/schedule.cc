#include "core/schedule.h"

#include <algorithm>

#include "core/mix.h"

namespace tp {

namespace {
// Position-sensitive: extends the hash of a prefix by one size.
uint64_t extend(uint64_t hash, uint64_t size) { return mix64(hash * 0x9e3779b97f4a7c15ULL + size + 1); }
}  // namespace

Schedules::Schedules(const PlanSpec& plan) : entries_(plan.schedule), cycle_(plan.cycle) {
  starts_ = plan.iterationStarts.empty() ? std::vector<uint64_t>{0} : plan.iterationStarts;
  starts_.push_back(entries_.size());
  prefixes_.resize(entries_.size());
  multisets_.assign(starts_.size() - 1, 0);
  for (size_t s = 0; s + 1 < starts_.size(); ++s) {
    uint64_t hash = 0;
    for (uint64_t k = starts_[s]; k < starts_[s + 1]; ++k) {
      prefixes_[k] = hash = extend(hash, entries_[k].size);
      multisets_[s] += mix64(entries_[k].size);
    }
  }
}

void Schedules::begin(Cursor* cursor, uint64_t iteration, uint64_t endedSizes, uint64_t endedCount) const {
  const size_t count = starts_.size() - 1;
  *cursor = Cursor{};
  cursor->iteration = iteration;
  if (iteration < count) {
    cursor->at = starts_[iteration];
    return;
  }
  if (cycle_ == 1 && endedCount > 0) {
    for (size_t s = count - 1; s-- > 0;) {
      if (length(s) == endedCount && multisets_[s] == endedSizes) {
        cursor->at = starts_[s + 1];
        return;
      }
    }
  }
  const uint64_t first = count - cycle_;  // of the iterations that repeat
  cursor->at = starts_[first + (iteration - first) % cycle_];
}

const ScheduleEntry* Schedules::next(Cursor* cursor, uint64_t bytes) const {
  if (cursor->lost || entries_.empty()) return nullptr;
  const uint64_t k = cursor->position++;
  const uint64_t hashBefore = cursor->hash;
  cursor->hash = extend(cursor->hash, bytes);
  std::vector<uint64_t>& ahead = cursor->ahead;
  if (cursor->at < entries_.size() && entries_[cursor->at].size == bytes) {
    const ScheduleEntry* entry = &entries_[cursor->at++];
    stepOverTaken(cursor);
    cursor->strays = 0;
    return entry;
  }
  if (const ScheduleEntry* late = takePassed(cursor, bytes)) {
    cursor->strays = 0;
    return late;
  }
  // Another order: the first entry of this size ahead that is not taken yet. A process's first iteration is
  // its start-up: a runtime creating a session allocates the sizes it recorded in an order that changes
  // from process to process, and a first size that happens to open a later schedule (a run's small output)
  // must not take the start-up there: its buffers live on, and on that schedule's blocks they would keep
  // the memory of every later iteration's tensors busy. So in a start-up this comes first.
  const ScheduleEntry* entry = cursor->startUp ? takeAhead(cursor, cursor->at, bytes) : nullptr;
  // The same order so far: the latest schedule whose sizes since the mark are the run's (later iterations
  // are the steadier ones).
  if (!entry && !cursor->reordered) {
    for (size_t s = starts_.size() - 1; s-- > 0;) {
      if (k < length(s) && prefixes_[starts_[s] + k] == cursor->hash) {
        cursor->at = starts_[s] + k + 1;
        cursor->strays = 0;
        return &entries_[starts_[s] + k];
      }
    }
  }
  // Elsewhere the ahead search follows the prefix search; for an iteration's first allocation, in whichever
  // schedule (latest first) has one near its start.
  if (!entry && !cursor->startUp) entry = takeAhead(cursor, cursor->at, bytes);
  for (size_t s = starts_.size() - 1; !entry && k == 0 && s-- > 0;) {
    if (length(s) > 0 && (entry = takeAhead(cursor, starts_[s], bytes))) cursor->at = starts_[s];
  }
  if (entry) {
    cursor->strays = 0;
    // So many taken past the expected entry: the run does not make that allocation (a one-off buffer of
    // the recording, such as a start-up's). Waiting for it, every later allocation would be taken ahead
    // until the lookahead ran out and the run lost its schedule. Should it come after all, it is passed.
    if (ahead.size() >= kMissingAfter) {
      std::vector<uint64_t>& passed = cursor->passed;
      if (passed.size() >= kLookahead) passed.erase(passed.begin());
      passed.push_back(cursor->at++);
      stepOverTaken(cursor);
    }
    return entry;
  }
  // A stray is left out of the sizes matched against the schedules, as if it had not come: the next
  // allocation may still pick a schedule by its size, as an iteration's first does.
  cursor->position = k;
  cursor->hash = hashBefore;
  if (++cursor->strays >= kStrays) cursor->lost = true;
  return nullptr;
}

void Schedules::stepOverTaken(Cursor* cursor) const {
  std::vector<uint64_t>& ahead = cursor->ahead;
  for (auto taken = std::find(ahead.begin(), ahead.end(), cursor->at); taken != ahead.end();
       taken = std::find(ahead.begin(), ahead.end(), cursor->at)) {
    ahead.erase(taken);
    cursor->at++;
  }
}

const ScheduleEntry* Schedules::takePassed(Cursor* cursor, uint64_t bytes) const {
  std::vector<uint64_t>& passed = cursor->passed;
  for (auto it = passed.begin(); it != passed.end(); ++it) {
    if (entries_[*it].size != bytes) continue;
    const ScheduleEntry* entry = &entries_[*it];
    passed.erase(it);
    return entry;
  }
  return nullptr;
}

void Schedules::markKeeps(const std::vector<std::vector<uint32_t>>& sharing) {
  if (entries_.empty()) return;
  // Backwards, with each block's next use: first over the repeating schedules as they come again after the
  // last one (positions past the end), then over every entry.
  constexpr uint64_t kNever = UINT64_MAX;
  std::vector<uint64_t> nextUse(sharing.size(), kNever);
  const uint64_t end = entries_.size();
  const uint64_t wrap = starts_[starts_.size() - 1 - std::min<uint64_t>(cycle_, starts_.size() - 1)];
  keeps_.assign(end, 1);
  // Returns whether the block named at entry k comes back before its sharers, then notes it used at `position`.
  const auto visit = [&](uint64_t k, uint64_t position) {
    const uint32_t block = entries_[k].block;
    if (block == ScheduleEntry::kAnyBlock) return true;
    uint64_t firstSharer = kNever;
    for (uint32_t s : sharing[block]) firstSharer = std::min(firstSharer, nextUse[s]);
    const bool keep = nextUse[block] < firstSharer;
    nextUse[block] = position;
    return keep;
  };
  for (uint64_t k = end; k-- > wrap;) visit(k, end + (k - wrap));
  for (uint64_t k = end; k-- > 0;) keeps_[k] = visit(k, k);
}

size_t Schedules::upcoming(const Cursor& cursor, const ScheduleEntry** out, size_t max) const {
  if (cursor.lost) return 0;
  size_t n = 0;
  for (uint64_t j = cursor.at; j < entries_.size() && n < max; ++j) {
    if (std::find(cursor.ahead.begin(), cursor.ahead.end(), j) == cursor.ahead.end()) out[n++] = &entries_[j];
  }
  return n;
}

const ScheduleEntry* Schedules::takeAhead(Cursor* cursor, uint64_t at, uint64_t bytes) const {
  std::vector<uint64_t>& ahead = cursor->ahead;
  if (ahead.size() >= kLookahead) return nullptr;
  const uint64_t end = std::min<uint64_t>(entries_.size(), at + kLookahead);
  for (uint64_t j = at + 1; j < end; ++j) {
    if (entries_[j].size != bytes || std::find(ahead.begin(), ahead.end(), j) != ahead.end()) continue;
    ahead.push_back(j);
    cursor->reordered = true;
    return &entries_[j];
  }
  return nullptr;
}

}  // namespace tp

#include "front_cache_log.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

namespace tp::napi {

namespace {
// The largest address or size a double names exactly.
constexpr double kMaxExact = 9007199254740992.0;

uint64_t exactUint(double d) { return d >= 0 && d <= kMaxExact && std::floor(d) == d ? static_cast<uint64_t>(d) : 0; }
}  // namespace

FrontCacheLog::FrontCacheLog(size_t capacity)
    : capacity_(capacity), slots_(new double[kEntries + 2 * capacity]()) {
  slots_[kReplyClass] = -1;
  slots_[kReplyBlock] = -1;
  slots_[kUpcomingCount] = -1;
}

Napi::Value FrontCacheLog::view(Napi::Env env, const std::shared_ptr<FrontCacheLog>& log) {
  const size_t bytes = (kEntries + 2 * log->capacity_) * sizeof(double);
  auto* holder = new std::shared_ptr<FrontCacheLog>(log);
  napi_value buffer;
  const napi_status status = napi_create_external_arraybuffer(
      env, log->slots_.get(), bytes, [](napi_env, void*, void* hint) { delete static_cast<std::shared_ptr<FrontCacheLog>*>(hint); },
      holder, &buffer);
  if (status != napi_ok) {
    delete holder;
    NAPI_THROW_IF_FAILED(env, status, Napi::Value());
  }
  return Napi::Float64Array::New(env, bytes / sizeof(double), Napi::ArrayBuffer(env, buffer), 0);
}

void FrontCacheLog::drain(Pool& pool) {
  const double pending = slots_[kCount];
  if (pending == 0) return;
  const size_t count = static_cast<size_t>(std::min<uint64_t>(exactUint(pending), capacity_));
  CachedOp batch[256];
  size_t n = 0;
  for (size_t i = 0; i < count; i++) {
    const double* entry = &slots_[kEntries + 2 * i];
    const void* data = reinterpret_cast<const void*>(static_cast<uintptr_t>(exactUint(entry[0])));
    if (entry[1] >= 0) {
      batch[n++] = {data, exactUint(entry[1])};
      if (n == 256) pool.applyCached(batch, std::exchange(n, 0));
      continue;
    }
    if (n) pool.applyCached(batch, std::exchange(n, 0));  // in order: what came before this release first
    // Back to the pool, its handle dormant: a live block the cache may not keep, or a block it held and gives
    // back. A release the pool refuses leaves the handle awake, so that nothing wakes it (the cache drops it
    // unused).
    ReleaseStatus status = pool.release(data);
    if (status == ReleaseStatus::NotLive) status = pool.returnCached(data);
    if (status == ReleaseStatus::Ok) book_.keep(data, exactUint(-entry[1]));
  }
  if (n) pool.applyCached(batch, n);
  slots_[kCount] = 0;
}

void FrontCacheLog::publish(Pool& pool, uint64_t generation, size_t window) {
  if (generation) slots_[kGeneration] = static_cast<double>(generation);
  Pool::Upcoming entries[kUpcomingMax];
  window = std::min(window, kUpcomingMax);
  const int64_t n = pool.upcoming(entries, window);
  slots_[kUpcomingCount] = static_cast<double>(n);
  slots_[kUpcomingMore] = n == static_cast<int64_t>(window) ? 1 : 0;
  slots_[kUpcomingUsed] = 0;
  for (int64_t i = 0; i < n; i++) {
    const ScheduleEntry& e = entries[i].entry;
    double* fields = &slots_[kUpcoming + kUpcomingFields * i];
    fields[0] = static_cast<double>(e.size);
    fields[1] = static_cast<double>(e.classIndex);
    fields[2] = e.block == ScheduleEntry::kAnyBlock ? -1 : static_cast<double>(e.block);
    fields[3] = entries[i].keep ? 1 : 0;
  }
}

void FrontCacheLog::reply(const Allocation& a) {
  slots_[kReplyAddress] = static_cast<double>(reinterpret_cast<uintptr_t>(a.data));
  slots_[kReplyClass] = a.status == AllocStatus::WouldMiss || a.cacheable ? a.classIndex : -1;
  slots_[kReplyBlock] = a.cacheable ? static_cast<double>(a.block) : -1;
}

}  // namespace tp::napi

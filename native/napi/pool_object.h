// JS class wrapping tp::Pool. Blocks cross into JS as external ArrayBuffers over pool memory (zero-copy).
#pragma once

#include <napi.h>

#include <memory>

#include "core/pool.h"
#include "external_memory.h"
#include "front_cache_log.h"

namespace tp::napi {

class PoolObject : public Napi::ObjectWrap<PoolObject> {
 public:
  static Napi::Function Define(Napi::Env env);
  // new NativePool({ interval, sizes, blocks, scheduleSizes?, scheduleClasses? : Float64Array }
  //                  | null (the default classes),
  //                { prefault, hugePages, lock, grow, growReserve, osMapThreshold,
  //                  offsets?: { height, sizes: Float64Array, offsets: Float64Array } (offsets mode),
  //                  frontCacheEntries?: the front cache's log capacity (0 or absent: no front cache) })
  // new NativePool(id: a number from share(), { frontCacheEntries? }): another handle on a pool that an
  // environment of this process shared (a worker_thread attaching to its parent's pool)
  explicit PoolObject(const Napi::CallbackInfo& info);
  ~PoolObject() override;

  // The PoolObject behind a JS value, or nullptr when it is not one.
  static PoolObject* From(const Napi::Value& value);
  // The pool, with the front cache's log applied: what JS did so far comes before what the caller does.
  const std::shared_ptr<Pool>& pool() {
    settle();
    return pool_;
  }

 private:
  void settle() {
    if (log_) log_->drain(*pool_);
  }
  // (bytes, cachedUpTo?) -> ArrayBuffer, null for WouldMiss (see Pool::alloc), or undefined: the front
  // cache's dormant handle of the reply address and `bytes` serves it (HandleBook::wake); the reply slots of
  // the front cache's log name the block
  Napi::Value Alloc(const Napi::CallbackInfo& info);
  Napi::Value Release(const Napi::CallbackInfo& info);     // (ArrayBuffer, NativeStream?) -> ReleaseCode
  Napi::Value Reclaim(const Napi::CallbackInfo& info);     // -> blocks returned
  Napi::Value SetEventPooling(const Napi::CallbackInfo& info);  // (boolean)
  Napi::Value Stats(const Napi::CallbackInfo& info);       // -> plain object of counters
  Napi::Value ClassStats(const Napi::CallbackInfo& info);  // -> { size, blocks, free, hits, lent, grown }
  Napi::Value Close(const Napi::CallbackInfo& info);
  Napi::Value MarkIteration(const Napi::CallbackInfo& info);   // -> { allocs, bytes, sizeHash, ... }
  Napi::Value SwitchPlan(const Napi::CallbackInfo& info);      // (plan as for the constructor)
  // (plan) -> Promise<generation>: built off the JS thread, installed by the next markIteration()
  Napi::Value PrepareSwitch(const Napi::CallbackInfo& info);
  Napi::Value StartRecording(const Napi::CallbackInfo& info);  // (limit: events held at most)
  Napi::Value StopRecording(const Napi::CallbackInfo& info);
  Napi::Value RecordingState(const Napi::CallbackInfo& info);  // -> { on, truncated, begin, end }
  // (from) -> { ops: Uint8Array, serials: Float64Array, values: Float64Array } of events [from, end)
  Napi::Value CopyRecording(const Napi::CallbackInfo& info);
  Napi::Value DiscardRecording(const Napi::CallbackInfo& info);  // (before)
  Napi::Value FrontCacheLogView(const Napi::CallbackInfo& info);  // -> Float64Array over the log, or null
  Napi::Value Settle(const Napi::CallbackInfo& info);  // applies the log, publishes what the schedule expects
  Napi::Value ReturnCached(const Napi::CallbackInfo& info);  // (ArrayBuffer held by the cache) -> ReleaseCode
  Napi::Value ForgetDormant(const Napi::CallbackInfo& info);  // (address, bytes) | () for all
  Napi::Value Share(const Napi::CallbackInfo& info);  // -> the number other environments attach with
  void startFrontCache(uint64_t entries);
  void setCreditCap();
  Napi::Value answerRelease(Napi::ArrayBuffer& buffer, ReleaseStatus status);

  std::shared_ptr<Pool> pool_;
  std::shared_ptr<FrontCacheLog> log_;
  ExternalMemoryCredit credit_;
};

// { height, sizes: Float64Array, offsets: Float64Array } -> the schedule of an offsets-mode arena (checked
// by OffsetArena::create). `name` names the value in errors.
OffsetSchedule readOffsetSchedule(const Napi::Value& value, const std::string& name);

// What Release answers; lib/pool/pool.ts turns these into errors.
enum ReleaseCode : int32_t { kReleased = 0, kNotOwned = 1, kNotLive = 2, kDetached = 3 };

}  // namespace tp::napi

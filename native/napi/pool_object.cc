#include "pool_object.h"

#include <algorithm>

#include "addon.h"
#include "args.h"
#include "async_work.h"
#include "pool_values.h"
#include "shared_pools.h"
#include "stream_object.h"

namespace tp::napi {

namespace {

void finalizeBlock(napi_env, void* data, void* hint) {
  Ticket* ticket = static_cast<Ticket*>(hint);
  if (ticket->log) ticket->log->drain(*ticket->pool);
  if (ticket->log) ticket->log->book().finalized(ticket);
  ticket->pool->releaseIfSerial(data, ticket->serial);
  delete ticket;
}

}  // namespace

// What Release and ReturnCached answer. The block may be handed out again right away: once it is given
// back, no view on this buffer may reach it any more.
Napi::Value PoolObject::answerRelease(Napi::ArrayBuffer& buffer, ReleaseStatus status) {
  Napi::Env env = buffer.Env();
  switch (status) {
    case ReleaseStatus::Ok: break;
    case ReleaseStatus::NotOwned: return Napi::Number::New(env, kNotOwned);
    case ReleaseStatus::NotLive:
    case ReleaseStatus::Stale: return Napi::Number::New(env, kNotLive);
  }
  const size_t bytes = buffer.ByteLength();
  buffer.Detach();
  if (!credit_.fits(bytes)) setCreditCap();  // the pool may have grown since
  credit_.afterDetach(env, bytes);
  return Napi::Number::New(env, kReleased);
}

OffsetSchedule readOffsetSchedule(const Napi::Value& value, const std::string& name) {
  if (!value.IsObject()) throw Napi::TypeError::New(value.Env(), name + " must be an object");
  Napi::Object o = value.As<Napi::Object>();
  OffsetSchedule schedule;
  schedule.height = requireUint(o.Get("height"), (name + ".height").c_str());
  forEachUint(o.Get("sizes"), (name + ".sizes").c_str(), [&](size_t, uint64_t v) { schedule.sizes.push_back(v); });
  forEachUint(o.Get("offsets"), (name + ".offsets").c_str(), [&](size_t, uint64_t v) { schedule.offsets.push_back(v); });
  return schedule;
}

Napi::Function PoolObject::Define(Napi::Env env) {
  return DefineClass(env, "NativePool",
                     {
                         InstanceMethod<&PoolObject::Alloc>("alloc"),
                         InstanceMethod<&PoolObject::Release>("release"),
                         InstanceMethod<&PoolObject::Stats>("stats"),
                         InstanceMethod<&PoolObject::ClassStats>("classStats"),
                         InstanceMethod<&PoolObject::Close>("close"),
                         InstanceMethod<&PoolObject::MarkIteration>("markIteration"),
                         InstanceMethod<&PoolObject::SwitchPlan>("switchPlan"),
                         InstanceMethod<&PoolObject::PrepareSwitch>("prepareSwitch"),
                         InstanceMethod<&PoolObject::StartRecording>("startRecording"),
                         InstanceMethod<&PoolObject::StopRecording>("stopRecording"),
                         InstanceMethod<&PoolObject::RecordingState>("recordingState"),
                         InstanceMethod<&PoolObject::CopyRecording>("copyRecording"),
                         InstanceMethod<&PoolObject::DiscardRecording>("discardRecording"),
                         InstanceMethod<&PoolObject::Reclaim>("reclaim"),
                         InstanceMethod<&PoolObject::SetEventPooling>("setEventPooling"),
                         InstanceMethod<&PoolObject::FrontCacheLogView>("frontCacheLog"),
                         InstanceMethod<&PoolObject::ReturnCached>("returnCached"),
                         InstanceMethod<&PoolObject::ForgetDormant>("forgetDormant"),
                         InstanceMethod<&PoolObject::Settle>("settle"),
                         InstanceMethod<&PoolObject::Share>("share"),
                     });
}

PoolObject* PoolObject::From(const Napi::Value& value) {
  if (!value.IsObject()) return nullptr;
  Addon* addon = value.Env().GetInstanceData<Addon>();
  if (!addon || !value.As<Napi::Object>().InstanceOf(addon->poolConstructor.Value())) return nullptr;
  return Unwrap(value.As<Napi::Object>());
}

PoolObject::PoolObject(const Napi::CallbackInfo& info) : Napi::ObjectWrap<PoolObject>(info) {
  if (info[0].IsNumber()) {
    const uint64_t id = requireUintArg(info, 0, "id");
    Napi::Object optionsArg = requireObjectArg(info, 1, "options");
    pool_ = findSharedPool(id);
    if (!pool_) {
      throw errorWithCode(info.Env(), "ERR_TP_NOT_SHARED",
                          "no pool of this process is shared as " + std::to_string(id) + " (never shared, or gone)");
    }
    if (pool_->stats().closed) throw errorWithCode(info.Env(), "ERR_TP_CLOSED", "the shared pool is closed");
    setCreditCap();
    startFrontCache(optionalUint(optionsArg, "frontCacheEntries", 0));
    return;
  }
  PlanSpec plan = info[0].IsNull() ? defaultPlan() : readPlan(info[0]);
  Napi::Object optionsArg = requireObjectArg(info, 1, "options");

  PoolOptions options;
  options.arena.prefault = optionalBool(optionsArg, "prefault", true);
  options.arena.hugePages = optionalBool(optionsArg, "hugePages", false);
  options.arena.lock = optionalBool(optionsArg, "lock", false);
  // The default classes grow before borrowing (or, with `spans`, serve large requests from spans as the process
  // pool does: what training replays a recording through); a plan borrows as it was trained to.
  if (optionalBool(optionsArg, "grow", false)) {
    const Growth defaults = optionalBool(optionsArg, "spans", false) ? Growth::Spans : Growth::BeforeBorrowing;
    options.growth = info[0].IsNull() ? defaults : Growth::AfterBorrowing;
  }
  options.growReserve = optionalUint(optionsArg, "growReserve", options.growReserve);
  options.osMapThreshold = optionalUint(optionsArg, "osMapThreshold", options.osMapThreshold);

  const Napi::Value offsetsArg = optionsArg.Get("offsets");
  const OffsetSchedule offsets =
      offsetsArg.IsUndefined() || offsetsArg.IsNull() ? OffsetSchedule{} : readOffsetSchedule(offsetsArg, "options.offsets");

  std::string error;
  pool_ = Pool::create(plan, options, &error, &offsets);
  if (!pool_) throw errorWithCode(info.Env(), "ERR_TP_POOL_CREATE", error);
  setCreditCap();
  startFrontCache(optionalUint(optionsArg, "frontCacheEntries", 0));
}

PoolObject::~PoolObject() { credit_.giveBack(Env()); }

void PoolObject::setCreditCap() {
  const PoolStats s = pool_->stats();
  credit_.setCap(s.closed ? 0 : std::max(s.arenaBytes, s.committedBytes));
}

void PoolObject::startFrontCache(uint64_t entries) {
  if (entries == 0) return;
  log_ = std::make_shared<FrontCacheLog>(std::min<uint64_t>(entries, 1 << 20));
  log_->publish(*pool_, pool_->stats().generation);
}

Napi::Value PoolObject::Share(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), static_cast<double>(sharePool(pool_)));
}

Napi::Value PoolObject::Alloc(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const uint64_t bytes = requireUintArg(info, 0, "bytes");
  const int32_t cachedUpTo =
      info[1].IsUndefined() ? -1 : static_cast<int32_t>(std::min<uint64_t>(requireUintArg(info, 1, "cachedUpTo"), INT32_MAX));
  settle();
  Allocation a = pool_->alloc(bytes, cachedUpTo);
  if (log_) {
    log_->reply(a);
    log_->publish(*pool_, 0, FrontCacheLog::kWindowAfterAlloc);
  }
  switch (a.status) {
    case AllocStatus::Ok: break;
    case AllocStatus::WouldMiss: return env.Null();
    case AllocStatus::Closed: throw errorWithCode(env, "ERR_TP_CLOSED", "the pool is closed");
    case AllocStatus::BadSize:
      throw Napi::RangeError::New(env, "bytes must be between 1 and 2^47, got " + std::to_string(bytes));
    case AllocStatus::OutOfMemory: {
      const std::string why = pool_->lastRefusal();
      throw errorWithCode(env, "ERR_TP_OUT_OF_MEMORY",
                          "the operating system refused " + std::to_string(bytes) + " bytes" + (why.empty() ? "" : ": " + why));
    }
  }
  if (log_ && log_->book().wake(a.data, bytes, a.serial)) return env.Undefined();
  Ticket* ticket = new Ticket{pool_, a.serial, log_, a.data, bytes};
  credit_.beforeHandle(env, bytes);
  napi_value result;
  napi_status status = napi_create_external_arraybuffer(env, a.data, bytes, finalizeBlock, ticket, &result);
  if (status != napi_ok) {
    pool_->release(a.data);
    delete ticket;
    NAPI_THROW_IF_FAILED(env, status, Napi::Value());
  }
  if (log_) log_->book().made(ticket);
  return Napi::Value(env, result);
}

Napi::Value PoolObject::Release(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::ArrayBuffer buffer = requireArrayBufferArg(info, 0, "buffer");
  if (buffer.IsDetached()) return Napi::Number::New(env, kDetached);
  StreamObject* stream = info[1].IsUndefined() ? nullptr : StreamObject::From(info[1]);
  if (!info[1].IsUndefined() && !stream) throw Napi::TypeError::New(env, "stream must be a NativeStream");
  settle();
  return answerRelease(buffer, stream ? pool_->releaseAfter(buffer.Data(), stream->stream()) : pool_->release(buffer.Data()));
}

Napi::Value PoolObject::ForgetDormant(const Napi::CallbackInfo& info) {
  if (!log_) return info.Env().Undefined();
  settle();  // a release entry still pending would make a handle dormant that the cache no longer holds
  if (info[0].IsUndefined()) {
    log_->book().forgetAll();
  } else {
    const uint64_t address = requireUintArg(info, 0, "address");
    log_->book().forget(reinterpret_cast<const void*>(static_cast<uintptr_t>(address)), requireUintArg(info, 1, "bytes"));
  }
  return info.Env().Undefined();
}

Napi::Value PoolObject::ReturnCached(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::ArrayBuffer buffer = requireArrayBufferArg(info, 0, "buffer");
  if (buffer.IsDetached()) return Napi::Number::New(env, kDetached);
  settle();
  return answerRelease(buffer, pool_->returnCached(buffer.Data()));
}

Napi::Value PoolObject::Settle(const Napi::CallbackInfo& info) {
  settle();
  if (log_) log_->publish(*pool_);
  return info.Env().Undefined();
}

Napi::Value PoolObject::FrontCacheLogView(const Napi::CallbackInfo& info) {
  return log_ ? FrontCacheLog::view(info.Env(), log_) : info.Env().Null();
}

Napi::Value PoolObject::Stats(const Napi::CallbackInfo& info) {
  settle();
  return statsObject(info.Env(), pool_->stats());
}

Napi::Value PoolObject::ClassStats(const Napi::CallbackInfo& info) {
  settle();
  return classStatsObject(info.Env(), pool_->classStats(), pool_->interval());
}

Napi::Value PoolObject::Reclaim(const Napi::CallbackInfo& info) {
  settle();
  return Napi::Number::New(info.Env(), static_cast<double>(pool_->reclaim()));
}

Napi::Value PoolObject::SetEventPooling(const Napi::CallbackInfo& info) {
  pool_->setEventPooling(info[0].IsBoolean() && info[0].As<Napi::Boolean>().Value());
  return info.Env().Undefined();
}

Napi::Value PoolObject::MarkIteration(const Napi::CallbackInfo& info) {
  settle();
  const IterationSummary ended = pool_->markIteration();
  if (log_) log_->publish(*pool_, ended.installed);
  if (ended.installed) {
    // The retired arena's free pages go back to the OS off this thread: this mark stays short.
    queueWork(info.Env(), "tensorpool.discardRetired", [pool = pool_] { pool->discardRetired(); }, [](napi_env) {});
  }
  return summaryIfWanted(info, ended);
}

Napi::Value PoolObject::SwitchPlan(const Napi::CallbackInfo& info) {
  const PlanSpec plan = readPlan(info[0]);
  std::string error;
  settle();
  if (!pool_->switchPlan(plan, &error)) throw errorWithCode(info.Env(), "ERR_TP_POOL_CREATE", error);
  if (log_) log_->publish(*pool_, pool_->stats().generation);
  return info.Env().Undefined();
}

Napi::Value PoolObject::PrepareSwitch(const Napi::CallbackInfo& info) {
  return prepareSwitchPromise(info.Env(), readPlan(info[0]),
                              [pool = pool_](const PlanSpec& plan, std::string* error) { return pool->prepareSwitch(plan, error); });
}

Napi::Value PoolObject::StartRecording(const Napi::CallbackInfo& info) {
  settle();
  pool_->startRecording(requireUintArg(info, 0, "limit"));
  return info.Env().Undefined();
}

Napi::Value PoolObject::StopRecording(const Napi::CallbackInfo& info) {
  settle();
  pool_->stopRecording();
  return info.Env().Undefined();
}

Napi::Value PoolObject::RecordingState(const Napi::CallbackInfo& info) {
  settle();
  return recordingStateObject(info.Env(), pool_->recordingState());
}

Napi::Value PoolObject::CopyRecording(const Napi::CallbackInfo& info) {
  settle();
  const std::vector<RecordedEvent> events = pool_->copyRecording(requireUintArg(info, 0, "from"));
  return recordingObject(info.Env(), events.data(), events.size());
}

Napi::Value PoolObject::DiscardRecording(const Napi::CallbackInfo& info) {
  settle();
  pool_->discardRecording(requireUintArg(info, 0, "before"));
  return info.Env().Undefined();
}

Napi::Value PoolObject::Close(const Napi::CallbackInfo& info) {
  settle();
  pool_->close();
  credit_.giveBack(info.Env());
  credit_.setCap(0);  // and stays 0: setCreditCap reads a closed pool's
  return info.Env().Undefined();
}

}  // namespace tp::napi

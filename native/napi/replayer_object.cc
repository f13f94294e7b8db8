#include "replayer_object.h"

#include "args.h"
#include "async_work.h"
#include "pool_object.h"

namespace tp::napi {

Napi::Function ReplayerObject::Define(Napi::Env env) {
  return DefineClass(env, "NativeReplayer",
                     {
                         InstanceMethod<&ReplayerObject::Run>("run"),
                         InstanceMethod<&ReplayerObject::RunAsync>("runAsync"),
                         InstanceMethod<&ReplayerObject::RunUntil>("runUntil"),
                         InstanceMethod<&ReplayerObject::Rewind>("rewind"),
                         InstanceAccessor<&ReplayerObject::FaultSourceName>("faultSource"),
                     });
}

ReplayerObject::ReplayerObject(const Napi::CallbackInfo& info) : Napi::ObjectWrap<ReplayerObject>(info) {
  Napi::Env env = info.Env();
  State& replay = *state_;
  if (info[0].IsString() && info[0].As<Napi::String>().Utf8Value() == "libc") {
    replay.allocator = std::make_unique<LibcAllocator>();
  } else if (PoolObject* pool = PoolObject::From(info[0])) {
    replay.allocator = std::make_unique<PoolAllocator>(pool->pool());
    replay.pool = pool->pool();
  } else if (info[0].IsObject() && info[0].As<Napi::Object>().Has("ideal")) {
    std::string error;
    auto arena = OffsetArena::create(readOffsetSchedule(info[0].As<Napi::Object>().Get("ideal"), "ideal"), ArenaOptions{}, &error);
    if (!arena) throw errorWithCode(env, "ERR_TP_POOL_CREATE", error);
    replay.allocator = std::make_unique<IdealAllocator>(std::move(arena));
  } else {
    throw Napi::TypeError::New(env, "allocator must be a NativePool, 'libc' or { ideal: offset schedule }");
  }
  if (!info[1].IsTypedArray() || info[1].As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array ||
      !info[2].IsTypedArray() || info[2].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array) {
    throw Napi::TypeError::New(env, "ops must be a Uint8Array and buffers an Int32Array");
  }
  Napi::Uint8Array ops = info[1].As<Napi::Uint8Array>();
  Napi::Int32Array buffers = info[2].As<Napi::Int32Array>();
  Napi::Float64Array sizes = requireFloat64ArrayArg(info, 3, "sizes");
  Napi::Object options = requireObjectArg(info, 4, "options");
  if (ops.ElementLength() != buffers.ElementLength()) throw Napi::TypeError::New(env, "ops and buffers differ in length");

  // Check the event sequence once: every free follows its allocation, no buffer is allocated twice,
  // sizes are positive integers. run() then never releases a null or unknown pointer.
  replay.sizes.assign(sizes.Data(), sizes.Data() + sizes.ElementLength());
  for (size_t b = 0; b < replay.sizes.size(); ++b) {
    if (!(replay.sizes[b] >= 1 && replay.sizes[b] <= static_cast<double>(Pool::kMaxRequest) && replay.sizes[b] == std::floor(replay.sizes[b]))) {
      throw Napi::RangeError::New(env, "sizes[" + std::to_string(b) + "] must be a positive integer");
    }
  }
  std::vector<uint8_t> seen(replay.sizes.size(), 0);  // 0 never allocated, 1 live, 2 freed
  replay.ops.assign(ops.Data(), ops.Data() + ops.ElementLength());
  replay.buffers.assign(buffers.Data(), buffers.Data() + buffers.ElementLength());
  for (size_t e = 0; e < replay.ops.size(); ++e) {
    const uint8_t op = replay.ops[e];
    if (op == 2) continue;
    const int32_t b = replay.buffers[e];
    const bool valid = op <= 1 && b >= 0 && static_cast<size_t>(b) < replay.sizes.size() && seen[static_cast<size_t>(b)] == op;
    if (!valid) throw Napi::RangeError::New(env, "event " + std::to_string(e) + " is not a valid alloc/free/mark");
    seen[static_cast<size_t>(b)] = op == 0 ? 1 : 2;
  }

  const std::string touch = options.Get("touch").IsString() ? options.Get("touch").As<Napi::String>().Utf8Value() : "";
  if (touch == "none") options_.touch = Touch::None;
  else if (touch == "pages") options_.touch = Touch::Pages;
  else if (touch == "full") options_.touch = Touch::Full;
  else if (touch == "verify") options_.touch = Touch::Verify;
  else throw Napi::TypeError::New(env, "options.touch must be 'none', 'pages', 'full' or 'verify'");
  options_.iterationMarks = optionalBool(options, "iterationMarks", false);
  options_.unmarked = optionalBool(options, "unmarked", false);
}

namespace {

Napi::Object repetitionObject(Napi::Env env, const Repetition& r) {
  Napi::Object o = Napi::Object::New(env);
  setNumber(o, "ns", r.ns);
  setNumber(o, "allocNs", r.allocNs);
  setNumber(o, "releaseNs", r.releaseNs);
  setNumber(o, "allocs", r.allocs);
  setNumber(o, "releases", r.releases);
  setNumber(o, "minorFaults", r.minorFaults);
  setNumber(o, "majorFaults", r.majorFaults);
  setNumber(o, "corruptions", r.corruptions);
  return o;
}

}  // namespace

// A pool closed meanwhile refuses every block, which is no lack of memory.
ReplayerObject::Refusal ReplayerObject::refusalOf(const State& replay) {
  if (replay.pool && replay.pool->stats().closed) return {"ERR_TP_CLOSED", "the pool was closed during the replay"};
  return {"ERR_TP_OUT_OF_MEMORY", "the allocator refused a block during the replay"};
}

Napi::Error ReplayerObject::refused(Napi::Env env, const State& replay) {
  const Refusal why = refusalOf(replay);
  return errorWithCode(env, why.code, why.message);
}

ReplayOptions ReplayerObject::optionsFor(const Napi::CallbackInfo& info, size_t index) const {
  ReplayOptions options = options_;
  options.timeOperations = info[index].IsBoolean() && info[index].As<Napi::Boolean>().Value();
  return options;
}

void ReplayerObject::checkIdle(Napi::Env env) const {
  if (busy_) throw errorWithCode(env, "ERR_TP_BUSY", "this replayer is running on another thread (runAsync)");
}

Napi::Value ReplayerObject::Run(const Napi::CallbackInfo& info) {
  checkIdle(info.Env());
  const ReplayOptions options = optionsFor(info, 0);
  State& replay = *state_;
  Repetition r;
  if (replay.cursor.next != 0) replayRewind(replay.trace(), *replay.allocator, options, replay.meter, replay.cursor, &r);
  if (!replayOnce(replay.trace(), *replay.allocator, options, replay.meter, replay.cursor, &r)) throw refused(info.Env(), replay);
  return repetitionObject(info.Env(), r);
}

Napi::Value ReplayerObject::RunAsync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  checkIdle(env);
  const ReplayOptions options = optionsFor(info, 0);
  if (state_->cursor.next != 0) {
    Repetition rewound;
    replayRewind(state_->trace(), *state_->allocator, options, state_->meter, state_->cursor, &rewound);
  }
  // Plain N-API from here (async_work.h): the promise, and a reference that keeps this object (and so
  // `busy_`) alive until the work settles.
  napi_deferred deferred;
  napi_value promise;
  napi_ref self;
  NAPI_THROW_IF_FAILED(env, napi_create_promise(env, &deferred, &promise), Napi::Value());
  NAPI_THROW_IF_FAILED(env, napi_create_reference(env, info.This(), 1, &self), Napi::Value());
  struct Outcome {
    Repetition r;
    bool ok = false;
  };
  auto outcome = std::make_shared<Outcome>();
  try {
    queueWork(
      env, "tensorpool.replay",
      [state = state_, options, outcome] {
        outcome->ok = replayOnce(state->trace(), *state->allocator, options, state->meter, state->cursor, &outcome->r);
      },
      [this, deferred, self, outcome, state = state_](napi_env settleEnv) {
        busy_ = false;
        napi_delete_reference(settleEnv, self);
        if (!outcome->ok) {
          const Refusal why = refusalOf(*state);
          settleDeferred(settleEnv, deferred, 0, why.code, why.message);
          return;
        }
        // Built in a scope of its own: repetitionObject throws (a C++ exception) only when N-API fails,
        // which it may as the environment goes; nothing may escape into the event loop then.
        try {
          Napi::HandleScope scope(settleEnv);
          napi_resolve_deferred(settleEnv, deferred, repetitionObject(Napi::Env(settleEnv), outcome->r));
        } catch (...) {
        }
      });
  } catch (...) {
    napi_delete_reference(env, self);
    throw;
  }
  busy_ = true;
  return Napi::Value(env, promise);
}

Napi::Value ReplayerObject::RunUntil(const Napi::CallbackInfo& info) {
  checkIdle(info.Env());
  State& replay = *state_;
  const uint64_t to = requireUintArg(info, 0, "to");
  if (to < replay.cursor.next || to > replay.ops.size()) {
    throw Napi::RangeError::New(info.Env(), "to must be between " + std::to_string(replay.cursor.next) + " and " +
                                                std::to_string(replay.ops.size()) + ", got " + std::to_string(to));
  }
  Repetition r;
  if (!replayUntil(replay.trace(), *replay.allocator, optionsFor(info, 1), replay.meter, replay.cursor, to, &r)) {
    throw refused(info.Env(), replay);
  }
  return repetitionObject(info.Env(), r);
}

Napi::Value ReplayerObject::Rewind(const Napi::CallbackInfo& info) {
  checkIdle(info.Env());
  State& replay = *state_;
  Repetition r;
  replayRewind(replay.trace(), *replay.allocator, optionsFor(info, 0), replay.meter, replay.cursor, &r);
  return repetitionObject(info.Env(), r);
}

Napi::Value ReplayerObject::FaultSourceName(const Napi::CallbackInfo& info) {
  return Napi::String::New(info.Env(), state_->meter.source() == FaultSource::PerfEvent ? "perf_event" : "getrusage");
}

}  // namespace tp::napi

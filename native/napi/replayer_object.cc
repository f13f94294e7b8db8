#include "replayer_object.h"

#include "args.h"
#include "pool_object.h"

namespace tp::napi {

Napi::Function ReplayerObject::Define(Napi::Env env) {
  return DefineClass(env, "NativeReplayer",
                     {
                         InstanceMethod<&ReplayerObject::Run>("run"),
                         InstanceMethod<&ReplayerObject::RunUntil>("runUntil"),
                         InstanceMethod<&ReplayerObject::Rewind>("rewind"),
                         InstanceAccessor<&ReplayerObject::FaultSourceName>("faultSource"),
                     });
}

ReplayerObject::ReplayerObject(const Napi::CallbackInfo& info) : Napi::ObjectWrap<ReplayerObject>(info) {
  Napi::Env env = info.Env();
  if (info[0].IsString() && info[0].As<Napi::String>().Utf8Value() == "libc") {
    allocator_ = std::make_unique<LibcAllocator>();
  } else if (PoolObject* pool = PoolObject::From(info[0])) {
    allocator_ = std::make_unique<PoolAllocator>(pool->pool());
  } else if (info[0].IsObject() && info[0].As<Napi::Object>().Has("ideal")) {
    std::string error;
    auto arena = OffsetArena::create(readOffsetSchedule(info[0].As<Napi::Object>().Get("ideal"), "ideal"), ArenaOptions{}, &error);
    if (!arena) throw errorWithCode(env, "ERR_TP_POOL_CREATE", error);
    allocator_ = std::make_unique<IdealAllocator>(std::move(arena));
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
  sizes_.assign(sizes.Data(), sizes.Data() + sizes.ElementLength());
  for (size_t b = 0; b < sizes_.size(); ++b) {
    if (!(sizes_[b] >= 1 && sizes_[b] <= static_cast<double>(Pool::kMaxRequest) && sizes_[b] == std::floor(sizes_[b]))) {
      throw Napi::RangeError::New(env, "sizes[" + std::to_string(b) + "] must be a positive integer");
    }
  }
  std::vector<uint8_t> state(sizes_.size(), 0);  // 0 never allocated, 1 live, 2 freed
  ops_.assign(ops.Data(), ops.Data() + ops.ElementLength());
  buffers_.assign(buffers.Data(), buffers.Data() + buffers.ElementLength());
  for (size_t e = 0; e < ops_.size(); ++e) {
    const uint8_t op = ops_[e];
    if (op == 2) continue;
    const int32_t b = buffers_[e];
    const bool valid = op <= 1 && b >= 0 && static_cast<size_t>(b) < sizes_.size() && state[static_cast<size_t>(b)] == op;
    if (!valid) throw Napi::RangeError::New(env, "event " + std::to_string(e) + " is not a valid alloc/free/mark");
    state[static_cast<size_t>(b)] = op == 0 ? 1 : 2;
  }

  const std::string touch = options.Get("touch").IsString() ? options.Get("touch").As<Napi::String>().Utf8Value() : "";
  if (touch == "none") options_.touch = Touch::None;
  else if (touch == "pages") options_.touch = Touch::Pages;
  else if (touch == "full") options_.touch = Touch::Full;
  else throw Napi::TypeError::New(env, "options.touch must be 'none', 'pages' or 'full'");
  options_.iterationMarks = optionalBool(options, "iterationMarks", false);
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
  return o;
}

Napi::Error refused(Napi::Env env) {
  return errorWithCode(env, "ERR_TP_OUT_OF_MEMORY", "the allocator refused a block during the replay");
}

}  // namespace

ReplayOptions ReplayerObject::optionsFor(const Napi::CallbackInfo& info, size_t index) const {
  ReplayOptions options = options_;
  options.timeOperations = info[index].IsBoolean() && info[index].As<Napi::Boolean>().Value();
  return options;
}

Napi::Value ReplayerObject::Run(const Napi::CallbackInfo& info) {
  const ReplayOptions options = optionsFor(info, 0);
  Repetition r;
  if (cursor_.next != 0) replayRewind(*allocator_, options, meter_, cursor_, &r);
  if (!replayOnce(trace(), *allocator_, options, meter_, cursor_, &r)) throw refused(info.Env());
  return repetitionObject(info.Env(), r);
}

Napi::Value ReplayerObject::RunUntil(const Napi::CallbackInfo& info) {
  const uint64_t to = requireUintArg(info, 0, "to");
  if (to < cursor_.next || to > ops_.size()) {
    throw Napi::RangeError::New(info.Env(), "to must be between " + std::to_string(cursor_.next) + " and " +
                                                std::to_string(ops_.size()) + ", got " + std::to_string(to));
  }
  Repetition r;
  if (!replayUntil(trace(), *allocator_, optionsFor(info, 1), meter_, cursor_, to, &r)) throw refused(info.Env());
  return repetitionObject(info.Env(), r);
}

Napi::Value ReplayerObject::Rewind(const Napi::CallbackInfo& info) {
  Repetition r;
  replayRewind(*allocator_, optionsFor(info, 0), meter_, cursor_, &r);
  return repetitionObject(info.Env(), r);
}

Napi::Value ReplayerObject::FaultSourceName(const Napi::CallbackInfo& info) {
  return Napi::String::New(info.Env(), meter_.source() == FaultSource::PerfEvent ? "perf_event" : "getrusage");
}

}  // namespace tp::napi

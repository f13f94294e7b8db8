#include "planning.h"

#include <algorithm>
#include <thread>

#include "planner/strategies.h"
#include "os/os.h"
#include "train/share.h"
#include "train/train.h"
#include "args.h"

namespace tp::napi {

namespace {

// Sets o[sizesKey] and o[blocksKey] to Float64Arrays of the classes' sizes and block counts.
void setClasses(Napi::Env env, Napi::Object& o, const std::vector<PlanClass>& classes, const char* sizesKey,
                const char* blocksKey) {
  Napi::Float64Array sizes = Napi::Float64Array::New(env, classes.size()), blocks = Napi::Float64Array::New(env, classes.size());
  for (size_t i = 0; i < classes.size(); ++i) {
    sizes[i] = static_cast<double>(classes[i].size);
    blocks[i] = static_cast<double>(classes[i].blocks);
  }
  o.Set(sizesKey, sizes);
  o.Set(blocksKey, blocks);
}

// Arguments 0-2, (sizes, starts, ends): Float64Arrays of one length, checked. The input points into them
// (alive for the call); interval, order and refine are left to the caller.
TrainInput readTrainInput(const Napi::CallbackInfo& info) {
  Napi::Float64Array sizes = requireFloat64ArrayArg(info, 0, "sizes");
  Napi::Float64Array starts = requireFloat64ArrayArg(info, 1, "starts");
  Napi::Float64Array ends = requireFloat64ArrayArg(info, 2, "ends");
  requireLifetimes(info.Env(), sizes, starts, ends);
  return TrainInput{sizes.Data(), starts.Data(), ends.Data(), sizes.ElementLength(), 0, TrainOrder::AllocTime};
}

std::vector<uint64_t> readIntervals(const Napi::Value& value) {
  std::vector<uint64_t> intervals;
  forEachUint(value, "intervals", [&](size_t, uint64_t interval) {
    if (interval == 0) throw Napi::RangeError::New(value.Env(), "every interval must be at least 1");
    intervals.push_back(interval);
  });
  return intervals;
}

}  // namespace

Napi::Value TrainSizeClasses(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  TrainInput input = readTrainInput(info);
  const std::vector<uint64_t> intervals = readIntervals(info[3]);
  const std::string order = info[4].IsString() ? info[4].As<Napi::String>().Utf8Value() : "";
  if (order != "alloc-time" && order != "size-desc") {
    throw Napi::TypeError::New(env, "order must be 'alloc-time' or 'size-desc'");
  }

  input.order = order == "alloc-time" ? TrainOrder::AllocTime : TrainOrder::SizeDescending;
  input.refine = info[5].IsBoolean() && info[5].As<Napi::Boolean>().Value();
  std::vector<TrainResult> results;
  std::vector<uint64_t> elapsed;
  trainEachInterval(input, intervals, std::thread::hardware_concurrency(), &results, &elapsed);

  Napi::Array out = Napi::Array::New(env, results.size());
  for (size_t r = 0; r < results.size(); ++r) {
    const TrainResult& result = results[r];
    Napi::Uint32Array classOf = Napi::Uint32Array::New(env, result.plan.schedule.size());
    for (size_t t = 0; t < result.plan.schedule.size(); ++t) classOf[t] = result.plan.schedule[t].classIndex;
    Napi::Object o = Napi::Object::New(env);
    setClasses(env, o, result.plan.classes, "sizes", "blocks");
    o.Set("refined", Napi::Boolean::New(env, result.refined));
    if (result.refined) setClasses(env, o, result.literal, "literalSizes", "literalBlocks");
    o.Set("borrows", Napi::Number::New(env, static_cast<double>(result.borrows)));
    o.Set("classOf", classOf);
    o.Set("ms", Napi::Number::New(env, static_cast<double>(elapsed[r]) / 1e6));
    out.Set(static_cast<uint32_t>(r), o);
  }
  return out;
}

Napi::Value TrainTimeShared(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  TrainInput input = readTrainInput(info);
  if (input.count == 0) throw Napi::RangeError::New(env, "nothing to train on: no tensors");
  const std::vector<uint64_t> intervals = readIntervals(info[3]);
  const uint64_t searchMs = info[4].IsNumber() ? static_cast<uint64_t>(std::max(0.0, info[4].As<Napi::Number>().DoubleValue())) : 0;
  ExtraConflicts extra;
  if (info.Length() > 5 && !info[5].IsUndefined()) {
    uint64_t first = 0;
    size_t values = 0;
    forEachUint(info[5], "extraConflicts", [&](size_t i, uint64_t v) {
      if (v >= input.count) throw Napi::RangeError::New(env, "extraConflicts names a tensor that does not exist");
      if (i % 2 == 0) first = v;
      else if (v != first) extra.emplace_back(static_cast<uint32_t>(first), static_cast<uint32_t>(v));
      values = i + 1;
    });
    if (values % 2 != 0) throw Napi::RangeError::New(env, "extraConflicts must hold pairs of tensors");
  }
  const uint64_t layoutMs = info.Length() > 6 && info[6].IsNumber() ? static_cast<uint64_t>(std::clamp(info[6].As<Napi::Number>().DoubleValue(), 0.0, 1e9)) : 0;
  Napi::Array out = Napi::Array::New(env, intervals.size());
  for (size_t i = 0; i < intervals.size(); ++i) {
    input.interval = intervals[i];
    const uint64_t began = os::monotonicNs();
    const SharedResult result = trainTimeShared(input, searchMs, extra, layoutMs);
    const double ms = static_cast<double>(os::monotonicNs() - began) / 1e6;
    if (!result.ok) {
      out.Set(static_cast<uint32_t>(i), env.Null());
      continue;
    }
    const PlanSpec& plan = result.plan;
    Napi::Object o = Napi::Object::New(env);
    setClasses(env, o, plan.classes, "sizes", "blocks");
    Napi::Uint32Array classOf = Napi::Uint32Array::New(env, plan.schedule.size()), blockOf = Napi::Uint32Array::New(env, plan.schedule.size());
    for (size_t t = 0; t < plan.schedule.size(); ++t) {
      classOf[t] = plan.schedule[t].classIndex;
      blockOf[t] = plan.schedule[t].block;
    }
    Napi::Uint32Array blockClass = Napi::Uint32Array::New(env, plan.layout.size());
    Napi::Float64Array blockOffset = Napi::Float64Array::New(env, plan.layout.size());
    for (size_t b = 0; b < plan.layout.size(); ++b) {
      blockClass[b] = plan.layout[b].classIndex;
      blockOffset[b] = static_cast<double>(plan.layout[b].offset);
    }
    o.Set("classOf", classOf);
    o.Set("blockOf", blockOf);
    o.Set("blockClass", blockClass);
    o.Set("blockOffset", blockOffset);
    setNumber(o, "arenaBytes", result.arenaBytes);
    o.Set("ms", Napi::Number::New(env, ms));
    out.Set(static_cast<uint32_t>(i), o);
  }
  return out;
}

namespace {

// A planning problem from JS, checked (planner::validate) before any planner sees it.
planner::Problem readPlanningProblem(const Napi::Object& object) {
  Napi::Env env = object.Env();
  planner::Problem p;
  forEachUint(object.Get("sizes"), "problem.sizes", [&](size_t, uint64_t v) { p.size.push_back(v); });
  if (!object.Get("neighbours").IsUndefined()) {
    std::vector<uint64_t> starts;
    forEachUint(object.Get("neighbourStarts"), "problem.neighbourStarts", [&](size_t, uint64_t v) { starts.push_back(v); });
    std::vector<uint32_t> targets;
    forEachUint(object.Get("neighbours"), "problem.neighbours", [&](size_t, uint64_t v) {
      if (v >= p.size.size()) throw Napi::RangeError::New(env, "problem.neighbours names a buffer that does not exist");
      targets.push_back(static_cast<uint32_t>(v));
    });
    if (starts.size() != p.size.size() + 1 || starts.back() != targets.size()) {
      throw Napi::RangeError::New(env, "problem.neighbourStarts must have one entry per buffer plus one");
    }
    p.neighbours.resize(p.size.size());
    for (size_t b = 0; b < p.size.size(); ++b) {
      if (starts[b] > starts[b + 1]) throw Napi::RangeError::New(env, "problem.neighbourStarts must not decrease");
      p.neighbours[b].assign(targets.begin() + static_cast<std::ptrdiff_t>(starts[b]),
                             targets.begin() + static_cast<std::ptrdiff_t>(starts[b + 1]));
    }
  } else {
    forEachUint(object.Get("lower"), "problem.lower", [&](size_t, uint64_t v) { p.lower.push_back(v); });
    forEachUint(object.Get("upper"), "problem.upper", [&](size_t, uint64_t v) { p.upper.push_back(v); });
  }
  std::string error;
  if (!planner::validate(p, &error)) throw errorWithCode(env, "ERR_TP_BAD_PROBLEM", error);
  return p;
}

std::vector<uint64_t> readOffsets(const Napi::Value& value, size_t count) {
  std::vector<uint64_t> offsets;
  offsets.reserve(count);
  forEachUint(value, "offsets", [&](size_t, uint64_t v) { offsets.push_back(v); });
  return offsets;
}

}  // namespace

Napi::Value PlanOffsets(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const planner::Problem problem = readPlanningProblem(requireObjectArg(info, 0, "problem"));
  Napi::Object optionsArg = requireObjectArg(info, 1, "options");
  planner::PlanOptions options;
  const std::string strategy = optionsArg.Get("strategy").IsString() ? optionsArg.Get("strategy").As<Napi::String>().Utf8Value() : "";
  if (strategy == "greedy-size") options.strategy = planner::Strategy::GreedySize;
  else if (strategy == "s1") options.strategy = planner::Strategy::S1;
  else if (strategy == "s2") options.strategy = planner::Strategy::S2;
  else if (strategy == "s3") options.strategy = planner::Strategy::S3;
  else if (strategy == "best") options.strategy = planner::Strategy::Best;
  else throw Napi::TypeError::New(env, "options.strategy must be greedy-size, s1, s2, s3 or best");
  options.timeLimitMs = optionalUint(optionsArg, "timeLimitMs", options.timeLimitMs);
  options.seed = optionalUint(optionsArg, "seed", options.seed);

  const planner::PlanResult result = planner::planOffsets(problem, options);
  Napi::Float64Array offsets = Napi::Float64Array::New(env, result.offsets.size());
  for (size_t b = 0; b < result.offsets.size(); ++b) offsets[b] = static_cast<double>(result.offsets[b]);
  Napi::Object o = Napi::Object::New(env);
  o.Set("offsets", offsets);
  setNumber(o, "peak", result.peak);
  setNumber(o, "lowerBound", result.lowerBound.value);
  o.Set("lowerBoundExact", Napi::Boolean::New(env, result.lowerBound.exact));
  o.Set("optimal", Napi::Boolean::New(env, result.optimal));
  o.Set("ms", Napi::Number::New(env, static_cast<double>(result.elapsedNs) / 1e6));
  o.Set("notes", Napi::String::New(env, result.notes));
  Napi::Uint32Array order = Napi::Uint32Array::New(env, result.order.size());
  std::copy(result.order.begin(), result.order.end(), order.Data());
  o.Set("order", order);
  std::string why;
  o.Set("valid", Napi::Boolean::New(env, planner::verify(problem, result.offsets, &why)));
  o.Set("why", Napi::String::New(env, why));
  return o;
}

Napi::Value VerifyOffsets(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const planner::Problem problem = readPlanningProblem(requireObjectArg(info, 0, "problem"));
  const std::vector<uint64_t> offsets = readOffsets(info[1], problem.count());
  std::string why;
  const bool valid = planner::verify(problem, offsets, &why);
  Napi::Object o = Napi::Object::New(env);
  o.Set("valid", Napi::Boolean::New(env, valid));
  o.Set("why", Napi::String::New(env, why));
  return o;
}

}  // namespace tp::napi

#include "planning.h"

#include <thread>

#include "../train.h"
#include "args.h"

namespace tp::napi {

Napi::Value TrainSizeClasses(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Float64Array sizes = requireFloat64ArrayArg(info, 0, "sizes");
  Napi::Float64Array starts = requireFloat64ArrayArg(info, 1, "starts");
  Napi::Float64Array ends = requireFloat64ArrayArg(info, 2, "ends");
  requireLifetimes(env, sizes, starts, ends);
  std::vector<uint64_t> intervals;
  forEachUint(info[3], "intervals", [&](size_t, uint64_t interval) {
    if (interval == 0) throw Napi::RangeError::New(env, "every interval must be at least 1");
    intervals.push_back(interval);
  });
  const std::string order = info[4].IsString() ? info[4].As<Napi::String>().Utf8Value() : "";
  if (order != "alloc-time" && order != "size-desc") {
    throw Napi::TypeError::New(env, "order must be 'alloc-time' or 'size-desc'");
  }

  TrainInput input{sizes.Data(), starts.Data(), ends.Data(), sizes.ElementLength(), 0,
                   order == "alloc-time" ? TrainOrder::AllocTime : TrainOrder::SizeDescending};
  std::vector<TrainResult> results;
  std::vector<uint64_t> elapsed;
  trainEachInterval(input, intervals, std::thread::hardware_concurrency(), &results, &elapsed);

  Napi::Array out = Napi::Array::New(env, results.size());
  for (size_t r = 0; r < results.size(); ++r) {
    const TrainResult& result = results[r];
    const size_t n = result.plan.classes.size();
    Napi::Float64Array classSizes = Napi::Float64Array::New(env, n), classBlocks = Napi::Float64Array::New(env, n);
    for (size_t i = 0; i < n; ++i) {
      classSizes[i] = static_cast<double>(result.plan.classes[i].size);
      classBlocks[i] = static_cast<double>(result.plan.classes[i].blocks);
    }
    Napi::Uint32Array classOf = Napi::Uint32Array::New(env, result.plan.schedule.size());
    for (size_t t = 0; t < result.plan.schedule.size(); ++t) classOf[t] = result.plan.schedule[t].classIndex;
    Napi::Object o = Napi::Object::New(env);
    o.Set("sizes", classSizes);
    o.Set("blocks", classBlocks);
    o.Set("borrows", Napi::Number::New(env, static_cast<double>(result.borrows)));
    o.Set("classOf", classOf);
    o.Set("ms", Napi::Number::New(env, static_cast<double>(elapsed[r]) / 1e6));
    out.Set(static_cast<uint32_t>(r), o);
  }
  return out;
}

}  // namespace tp::napi

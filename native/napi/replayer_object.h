// JS class wrapping the replay loop: new NativeReplayer(allocator, ops, buffers, sizes, options), then
// run() once per repetition, or runUntil() in steps. The events are copied and checked once, so run() can trust them.
#pragma once

#include <napi.h>

#include <memory>
#include <vector>

#include "replay/replay.h"

namespace tp::napi {

class ReplayerObject : public Napi::ObjectWrap<ReplayerObject> {
 public:
  static Napi::Function Define(Napi::Env env);
  // allocator: a NativePool, 'libc' (this process's malloc) or { ideal: { height, sizes, offsets } } (the
  // yardstick, replay.h IdealAllocator). ops: Uint8Array, buffers: Int32Array,
  // sizes: Float64Array, options: { touch: 'none' | 'pages' | 'full' | 'verify', iterationMarks: boolean,
  // unmarked?: boolean (never mark the pool: one of several replays on a shared pool) }.
  explicit ReplayerObject(const Napi::CallbackInfo& info);

 private:
  // (timeOperations: boolean) -> { ns, allocNs, releaseNs, allocs, releases, minorFaults, majorFaults,
  // corruptions }
  Napi::Value Run(const Napi::CallbackInfo& info);
  // The same on a libuv thread (several replayers drive one pool from as many threads) -> Promise of it.
  // The replayer is busy until the promise settles: any other call throws ERR_TP_BUSY. Its page-fault
  // counts are not the replay's own: the counters follow one thread (perf_event: the one that made the
  // replayer), and the replay runs on another.
  Napi::Value RunAsync(const Napi::CallbackInfo& info);
  // (to: event index, timeOperations) -> the same, for events [where the last step stopped, to): the
  // blocks they allocate stay live for the next step
  Napi::Value RunUntil(const Napi::CallbackInfo& info);
  // Releases the blocks left live by runUntil and starts over. -> the same
  Napi::Value Rewind(const Napi::CallbackInfo& info);
  Napi::Value FaultSourceName(const Napi::CallbackInfo& info);
  ReplayOptions optionsFor(const Napi::CallbackInfo& info, size_t timeOperationsArg) const;
  void checkIdle(Napi::Env env) const;

  // What a replay runs on, shared with a RunAsync in flight (which may outlive this object when its
  // environment goes).
  struct State {
    std::unique_ptr<ReplayAllocator> allocator;
    std::shared_ptr<Pool> pool;  // the pool `allocator` takes from, if it is one (a refusal may be its close())
    std::vector<uint8_t> ops;
    std::vector<int32_t> buffers;
    std::vector<double> sizes;
    ReplayCursor cursor;
    FaultMeter meter;
    ReplayTrace trace() const { return {ops.data(), buffers.data(), ops.size(), sizes.data(), sizes.size()}; }
  };
  // Why a replay stopped on a refused block: its pool was closed meanwhile (ERR_TP_CLOSED), or the
  // allocator had no memory (ERR_TP_OUT_OF_MEMORY).
  struct Refusal {
    const char* code;
    const char* message;
  };
  static Refusal refusalOf(const State& replay);
  static Napi::Error refused(Napi::Env env, const State& replay);
  std::shared_ptr<State> state_ = std::make_shared<State>();
  ReplayOptions options_;
  bool busy_ = false;  // a RunAsync in flight owns the state
};

}  // namespace tp::napi

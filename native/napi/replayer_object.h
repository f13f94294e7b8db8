// JS class wrapping the replay loop: new NativeReplayer(allocator, ops, buffers, sizes, options), then
// run() once per repetition, or runUntil() in steps. The events are copied and checked once, so run() can trust them.
#pragma once

#include <napi.h>

#include <memory>
#include <vector>

#include "../replay.h"

namespace tp::napi {

class ReplayerObject : public Napi::ObjectWrap<ReplayerObject> {
 public:
  static Napi::Function Define(Napi::Env env);
  // allocator: a NativePool, 'libc' (this process's malloc) or { ideal: { height, sizes, offsets } } (the
  // yardstick, replay.h IdealAllocator). ops: Uint8Array, buffers: Int32Array,
  // sizes: Float64Array, options: { touch: 'none' | 'pages' | 'full', iterationMarks: boolean }.
  explicit ReplayerObject(const Napi::CallbackInfo& info);

 private:
  // (timeOperations: boolean) -> { ns, allocNs, releaseNs, allocs, releases, minorFaults, majorFaults }
  Napi::Value Run(const Napi::CallbackInfo& info);
  // (to: event index, timeOperations) -> the same, for events [where the last step stopped, to): the
  // blocks they allocate stay live for the next step
  Napi::Value RunUntil(const Napi::CallbackInfo& info);
  // Releases the blocks left live by runUntil and starts over. -> the same
  Napi::Value Rewind(const Napi::CallbackInfo& info);
  Napi::Value FaultSourceName(const Napi::CallbackInfo& info);
  ReplayOptions optionsFor(const Napi::CallbackInfo& info, size_t timeOperationsArg) const;
  ReplayTrace trace() const { return {ops_.data(), buffers_.data(), ops_.size(), sizes_.data(), sizes_.size()}; }

  std::unique_ptr<ReplayAllocator> allocator_;
  std::vector<uint8_t> ops_;
  std::vector<int32_t> buffers_;
  std::vector<double> sizes_;
  ReplayCursor cursor_;
  ReplayOptions options_;
  FaultMeter meter_;
};

}  // namespace tp::napi

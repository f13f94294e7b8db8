// JS class wrapping the replay loop: new NativeReplayer(allocator, ops, buffers, sizes, options), then
// run() once per repetition. The events are copied and checked once, so run() can trust them.
#pragma once

#include <napi.h>

#include <memory>
#include <vector>

#include "../replay.h"

namespace tp::napi {

class ReplayerObject : public Napi::ObjectWrap<ReplayerObject> {
 public:
  static Napi::Function Define(Napi::Env env);
  // allocator: a NativePool, or 'libc' (this process's malloc). ops: Uint8Array, buffers: Int32Array,
  // sizes: Float64Array, options: { touch: 'none' | 'pages' | 'full', iterationMarks: boolean }.
  explicit ReplayerObject(const Napi::CallbackInfo& info);

 private:
  // (timeOperations: boolean) -> { ns, allocNs, releaseNs, allocs, releases, minorFaults, majorFaults }
  Napi::Value Run(const Napi::CallbackInfo& info);
  Napi::Value FaultSourceName(const Napi::CallbackInfo& info);

  std::unique_ptr<ReplayAllocator> allocator_;
  std::vector<uint8_t> ops_;
  std::vector<int32_t> buffers_;
  std::vector<double> sizes_;
  std::vector<void*> slots_;
  ReplayOptions options_;
  FaultMeter meter_;
};

}  // namespace tp::napi

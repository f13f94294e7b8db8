#include "ort_allocator.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <type_traits>

#include "os/os.h"

namespace tp::ort {

namespace {

// --- ONNX Runtime's C ABI, as far as this file uses it ---------------------------------------------------
// OrtApi is a table of function pointers that only ever grows: ONNX Runtime static_asserts the offset of the
// last entry of every finished API version, so an entry's slot never moves. The slots below are counted in
// onnxruntime_c_api.h (all within API version 11); what each call answers is checked where it is used.
constexpr uint32_t kApiVersion = 11;
constexpr size_t kGetErrorMessage = 2;
constexpr size_t kCreateEnv = 3;
constexpr size_t kCreateCpuMemoryInfo = 69;
constexpr size_t kReleaseStatus = 93;
constexpr size_t kRegisterAllocator = 176;
constexpr size_t kUnregisterAllocator = 177;

constexpr int kLoggingLevelWarning = 2;  // ORT_LOGGING_LEVEL_WARNING
constexpr int kDeviceAllocator = 0;      // OrtDeviceAllocator
constexpr int kMemTypeDefault = 0;       // OrtMemTypeDefault

struct OrtApiBaseAbi {
  const void* (*getApi)(uint32_t version);
  const char* (*getVersionString)();
};

using Status = void*;  // OrtStatus*: null is success
using GetErrorMessageFn = const char* (*)(const void* status);
using CreateEnvFn = Status (*)(int level, const char* logId, void** env);
using CreateCpuMemoryInfoFn = Status (*)(int type, int memType, void** info);
using ReleaseStatusFn = void (*)(void* status);
using RegisterAllocatorFn = Status (*)(void* env, void* allocator);
using UnregisterAllocatorFn = Status (*)(void* env, const void* info);

// The entry in `index` of the table, copied out as the function type it has there.
template <typename Fn>
Fn entry(const void* api, size_t index) {
  Fn fn;
  std::memcpy(&fn, static_cast<const char*>(api) + index * sizeof(void*), sizeof fn);
  return fn;
}

// The members ONNX Runtime reads of an OrtAllocator whose version is below 18 (Reserve and later members
// are read only from version 18 on).
struct OrtAllocatorAbi {
  uint32_t version;
  void* (*alloc)(OrtAllocatorAbi* self, size_t bytes);
  void (*free)(OrtAllocatorAbi* self, void* data);
  const void* (*info)(const OrtAllocatorAbi* self);
};
constexpr uint32_t kAllocatorVersion = 11;

// --- the allocator lent to ONNX Runtime ---------------------------------------------------------------------
// Never freed: a session keeps the allocator it was created with for as long as it lives, even after an
// unregistration, and ONNX Runtime gives no notice when the last such session is gone.
struct PoolAllocator {
  OrtAllocatorAbi abi;  // first: the pointer ONNX Runtime passes back is a pointer to this struct
  const void* memoryInfo;
  std::shared_ptr<Pool> pool;
  std::atomic<uint64_t> allocs{0}, frees{0}, heapFallbacks{0};
};
static_assert(std::is_standard_layout_v<PoolAllocator>, "PoolAllocator must be pointer-interconvertible with its abi");

PoolAllocator* self(OrtAllocatorAbi* abi) { return reinterpret_cast<PoolAllocator*>(abi); }

// ONNX Runtime expects 64-byte aligned memory (its kernels' preferred alignment); pool blocks are.
void* allocate(OrtAllocatorAbi* abi, size_t bytes) {
  PoolAllocator* a = self(abi);
  const uint64_t n = bytes == 0 ? 1 : bytes;
  if (n <= Pool::kMaxRequest) {
    const Allocation allocation = a->pool->alloc(n);
    if (allocation.data) {
      a->allocs.fetch_add(1, std::memory_order_relaxed);
      return allocation.data;
    }
  }
  // The pool is closed: the C library serves, and release() below tells its memory from the pool's.
  a->heapFallbacks.fetch_add(1, std::memory_order_relaxed);
  return os::allocateHeap(n, 64);
}

void release(OrtAllocatorAbi* abi, void* data) {
  if (!data) return;
  PoolAllocator* a = self(abi);
  const ReleaseStatus status = a->pool->release(data);
  if (status == ReleaseStatus::Ok) {
    a->frees.fetch_add(1, std::memory_order_relaxed);
  } else if (status == ReleaseStatus::NotOwned) {
    os::freeHeap(data);
  }
  // NotLive cannot happen (ONNX Runtime frees each allocation once); a second free is ignored, not crashed on.
}

const void* memoryInfo(const OrtAllocatorAbi* abi) { return reinterpret_cast<const PoolAllocator*>(abi)->memoryInfo; }

// --- the registration ------------------------------------------------------------------------------------------
struct Runtime {
  const void* api = nullptr;
  void* env = nullptr;         // a reference to ONNX Runtime's environment, held for the process's life
  const void* cpuInfo = nullptr;
  std::string version;
};

std::mutex mu;
Runtime runtime;                     // found once
PoolAllocator* registered = nullptr;  // the allocator the environment holds now
PoolAllocator* last = nullptr;        // the one registered last (its counters)

// Takes `status` (released here): true when it is success, else false with its message in *error.
bool succeeded(Status status, const char* what, std::string* error) {
  if (!status) return true;
  *error = std::string(what) + ": " + entry<GetErrorMessageFn>(runtime.api, kGetErrorMessage)(status);
  entry<ReleaseStatusFn>(runtime.api, kReleaseStatus)(status);
  return false;
}

// "1.30.0" -> 1030; 0 when the string is not a version.
int versionNumber(const char* text) {
  int major = 0, minor = 0;
  return text && std::sscanf(text, "%d.%d", &major, &minor) == 2 ? major * 1000 + minor : 0;
}

bool findRuntimeLocked(const char* libraryPath, std::string* error) {
  if (runtime.api) return true;
  void* library = dlopen(libraryPath, RTLD_NOW | RTLD_NOLOAD);
  if (!library) {
    *error = std::string("ONNX Runtime is not loaded in this process from ") + libraryPath +
             ": load onnxruntime-node first (require or import it)";
    return false;
  }
  using GetApiBaseFn = const OrtApiBaseAbi* (*)();
  auto getApiBase = reinterpret_cast<GetApiBaseFn>(dlsym(library, "OrtGetApiBase"));
  dlclose(library);  // RTLD_NOLOAD took a reference to a library that stays loaded: give it back
  const OrtApiBaseAbi* base = getApiBase ? getApiBase() : nullptr;
  if (!base) {
    *error = std::string(libraryPath) + " does not export OrtGetApiBase: it is not ONNX Runtime";
    return false;
  }
  const char* version = base->getVersionString();
  if (versionNumber(version) < 1016) {
    *error = std::string("ONNX Runtime ") + (version ? version : "(no version)") +
             " is too old to lend its sessions an allocator: 1.16 or newer is needed";
    return false;
  }
  const void* api = base->getApi(kApiVersion);
  if (!api) {
    *error = std::string("ONNX Runtime ") + version + " does not offer API version " + std::to_string(kApiVersion);
    return false;
  }
  runtime.api = api;
  // The environment is a process singleton: this returns onnxruntime-node's (or makes the one it will get).
  void* env = nullptr;
  void* info = nullptr;
  if (!succeeded(entry<CreateEnvFn>(api, kCreateEnv)(kLoggingLevelWarning, "tensorpool", &env), "CreateEnv", error) ||
      !succeeded(entry<CreateCpuMemoryInfoFn>(api, kCreateCpuMemoryInfo)(kDeviceAllocator, kMemTypeDefault, &info),
                 "CreateCpuMemoryInfo", error)) {
    runtime.api = nullptr;  // an env taken is kept (a reference, harmless); the next call tries again
    return false;
  }
  runtime.env = env;
  runtime.cpuInfo = info;
  runtime.version = version;
  return true;
}

bool unregisterLocked(std::string* error) {
  if (!registered) {
    *error = "no pool is registered with ONNX Runtime";
    return false;
  }
  if (!succeeded(entry<UnregisterAllocatorFn>(runtime.api, kUnregisterAllocator)(runtime.env, runtime.cpuInfo),
                 "UnregisterAllocator", error)) {
    return false;
  }
  registered = nullptr;
  return true;
}

}  // namespace

bool registerAllocator(const char* libraryPath, std::shared_ptr<Pool> pool, std::string* version, std::string* error) {
  std::lock_guard<std::mutex> lock(mu);
  if (!findRuntimeLocked(libraryPath, error)) return false;
  if (registered && registered->pool == pool) {
    *version = runtime.version;
    return true;
  }
  PoolAllocator* previous = registered;
  if (previous && !unregisterLocked(error)) return false;
  auto* allocator = new PoolAllocator{{kAllocatorVersion, allocate, release, memoryInfo}, runtime.cpuInfo, std::move(pool)};
  auto add = entry<RegisterAllocatorFn>(runtime.api, kRegisterAllocator);
  if (!succeeded(add(runtime.env, &allocator->abi), "RegisterAllocator", error)) {
    delete allocator;  // ONNX Runtime refused it, so holds no pointer to it
    std::string ignored;
    if (previous && succeeded(add(runtime.env, &previous->abi), "RegisterAllocator", &ignored)) registered = previous;
    return false;
  }
  registered = last = allocator;
  *version = runtime.version;
  return true;
}

bool unregisterAllocator(std::string* error) {
  std::lock_guard<std::mutex> lock(mu);
  return unregisterLocked(error);
}

AllocatorCounters allocatorCounters() {
  std::lock_guard<std::mutex> lock(mu);
  if (!last) return {};
  return {last->allocs.load(std::memory_order_relaxed), last->frees.load(std::memory_order_relaxed),
          last->heapFallbacks.load(std::memory_order_relaxed)};
}

}  // namespace tp::ort

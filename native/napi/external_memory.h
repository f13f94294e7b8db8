// What a pool's buffers tell V8 about external memory.
//
// V8 counts the bytes of every ArrayBuffer it holds as external memory and starts a full collection when
// that count rises 64 MiB above its level at the last one, so that garbage holding malloc'd memory gets
// freed. A pool's block is not such memory: it was committed when the arena was mapped, and collecting a
// dropped buffer gives nothing back to the OS. Counted per handle, a loop that allocates and releases
// more than that threshold of tensors per iteration would pay a full collection every iteration.
//
// So a released block stays counted: after the handle is detached (V8 subtracts its bytes) the pool adds
// them back as a credit, and the next handle it makes spends the credit instead of raising the count. The
// credit is at most the pool's committed bytes, so V8 sees about the memory the pool really holds; it only
// ever subtracts what it added (newer V8 aborts the process when the count would go below zero), and it
// is given back when the pool is closed or collected.
#pragma once

#include <napi.h>

#include <algorithm>
#include <cstdint>

namespace tp::napi {

class ExternalMemoryCredit {
 public:
  // The credit stays at most `cap` bytes (the pool's committed bytes; 0 until set).
  void setCap(uint64_t cap) { cap_ = cap; }

  // Before a handle of `bytes` is made: spends credit so that the handle's own count leaves the total as it was.
  void beforeHandle(napi_env env, uint64_t bytes) {
    const uint64_t spent = std::min(bytes, credit_);
    if (spent == 0) return;
    adjust(env, -static_cast<int64_t>(spent));
    credit_ -= spent;
  }

  // Whether `bytes` more credit stays within the cap.
  bool fits(uint64_t bytes) const { return bytes <= headroom(); }

  // After a handle of `bytes` was detached by a release: counts the block's bytes again, as credit.
  void afterDetach(napi_env env, uint64_t bytes) {
    const uint64_t added = std::min(bytes, headroom());
    if (added == 0) return;
    adjust(env, static_cast<int64_t>(added));
    credit_ += added;
  }

  // The pool is closed or gone: the credit leaves V8's count.
  void giveBack(napi_env env) {
    if (credit_ == 0) return;
    adjust(env, -static_cast<int64_t>(credit_));
    credit_ = 0;
  }

 private:
  uint64_t headroom() const { return cap_ - std::min(cap_, credit_); }
  static void adjust(napi_env env, int64_t change) {
    int64_t total;
    napi_adjust_external_memory(env, change, &total);  // fails only for a bad argument
  }

  uint64_t credit_ = 0;
  uint64_t cap_ = 0;
};

}  // namespace tp::napi

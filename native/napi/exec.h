// The addon function execProgram(path, argv, env, state): `tensorpool run` becomes the command it runs
// (os/exec.h). The JS side (lib/cli/exec.ts) finds the file, builds the environment and reads the caller's
// state; this checks the shapes and execs.
#pragma once

#include <napi.h>

namespace tp::napi {

// (path: string, argv: string[], env: string[], state: { ignored: number[], blocked: number[],
//  openFiles?: number (-1: unlimited), closed: number[] }) -> the execve's errno; returns only on failure.
Napi::Value ExecProgram(const Napi::CallbackInfo& info);

}  // namespace tp::napi

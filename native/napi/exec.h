// The addon function execProgram(path, argv, env): `tensorpool run`, started as `node main.js run`, becomes the
// command it runs (os/exec.h). The JS side (lib/cli/exec.ts) finds the file and builds the environment; this
// checks the shapes and execs.
#pragma once

#include <napi.h>

namespace tp::napi {

// (path: string, argv: string[], env: string[]) -> the execve's errno; returns only on failure.
Napi::Value ExecProgram(const Napi::CallbackInfo& info);

}  // namespace tp::napi

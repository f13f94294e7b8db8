// The preload library's options table (preload/options.h), for `tensorpool run`: the JS side checks its options
// with the library's own parsers and lists the table in its help, so each grammar is written once.
#pragma once

#include <napi.h>

namespace tp::napi {

// preloadOptions() -> [{ name, flag, kind, fallback, help }] in the table's order.
Napi::Value PreloadOptions(const Napi::CallbackInfo& info);
// checkPreloadOption(name: string, text: string) -> null when the library takes `text` for `name`, else the
// line it would print. Throws a TypeError for a name the table does not have.
Napi::Value CheckPreloadOption(const Napi::CallbackInfo& info);

}  // namespace tp::napi

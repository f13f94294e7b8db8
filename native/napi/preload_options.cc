#include "preload_options.h"

#include <string>

#include "preload/options.h"

namespace tp::napi {

namespace {
const char* kindName(preload::OptionKind kind) {
  switch (kind) {
    case preload::OptionKind::Bytes: return "bytes";
    case preload::OptionKind::Count: return "count";
    case preload::OptionKind::Threshold: return "threshold";
    case preload::OptionKind::Milliseconds: return "milliseconds";
    case preload::OptionKind::Switch: return "switch";
    case preload::OptionKind::Path: return "path";
  }
  return "";
}

Napi::Value textOrNull(Napi::Env env, const char* text) { return text ? Napi::String::New(env, text) : env.Null(); }
}  // namespace

Napi::Value PreloadOptions(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Array table = Napi::Array::New(env, preload::kOptionCount);
  for (size_t i = 0; i < preload::kOptionCount; ++i) {
    const preload::OptionSpec& spec = preload::kOptions[i];
    Napi::Object entry = Napi::Object::New(env);
    entry.Set("name", spec.name);
    entry.Set("flag", textOrNull(env, spec.flag));
    entry.Set("kind", kindName(spec.kind));
    entry.Set("fallback", textOrNull(env, spec.fallback));
    entry.Set("help", spec.help);
    table.Set(static_cast<uint32_t>(i), entry);
  }
  return table;
}

Napi::Value CheckPreloadOption(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsString() || !info[1].IsString()) throw Napi::TypeError::New(env, "name and text must be strings");
  const std::string name = info[0].As<Napi::String>().Utf8Value();
  const std::string text = info[1].As<Napi::String>().Utf8Value();
  const preload::OptionSpec* spec = preload::findOption(name.c_str());
  if (!spec) throw Napi::TypeError::New(env, name + " is not an option of the preload library");
  uint64_t number;
  std::string error;
  if (text.find('\0') != std::string::npos) return Napi::String::New(env, name + " must not contain a NUL character");
  return preload::parseOption(*spec, text.c_str(), &number, &error) ? env.Null() : Napi::String::New(env, error);
}

}  // namespace tp::napi

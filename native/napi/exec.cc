#include "exec.h"

#include <cstdint>
#include <string>
#include <vector>

#include "os/exec.h"

namespace tp::napi {

namespace {

std::string requireString(const Napi::Value& value, const std::string& name) {
  if (!value.IsString()) throw Napi::TypeError::New(value.Env(), name + " must be a string");
  std::string text = value.As<Napi::String>().Utf8Value();
  if (text.find('\0') != std::string::npos) throw Napi::TypeError::New(value.Env(), name + " must not contain a NUL character");
  return text;
}

std::vector<std::string> requireStrings(const Napi::Value& value, const char* name) {
  if (!value.IsArray()) throw Napi::TypeError::New(value.Env(), std::string(name) + " must be an array of strings");
  Napi::Array array = value.As<Napi::Array>();
  std::vector<std::string> out;
  for (uint32_t i = 0; i < array.Length(); ++i) out.push_back(requireString(array.Get(i), std::string(name) + "[" + std::to_string(i) + "]"));
  return out;
}

}  // namespace

Napi::Value ExecProgram(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const std::string path = requireString(info[0], "path");
  const std::vector<std::string> argv = requireStrings(info[1], "argv");
  if (argv.empty()) throw Napi::TypeError::New(env, "argv must not be empty");
  const std::vector<std::string> environment = requireStrings(info[2], "env");
  return Napi::Number::New(env, os::execProgram(path, argv, environment));
}

}  // namespace tp::napi

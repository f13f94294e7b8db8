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

// Integers from `low` to `high`, each.
std::vector<int> requireInts(const Napi::Value& value, const char* name, int low, int high) {
  if (!value.IsArray()) throw Napi::TypeError::New(value.Env(), std::string(name) + " must be an array of integers");
  Napi::Array array = value.As<Napi::Array>();
  std::vector<int> out;
  for (uint32_t i = 0; i < array.Length(); ++i) {
    const Napi::Value item = array.Get(i);
    const double d = item.IsNumber() ? item.As<Napi::Number>().DoubleValue() : -1;
    if (!(d >= low && d <= high) || static_cast<int>(d) != d) {
      throw Napi::RangeError::New(value.Env(), std::string(name) + "[" + std::to_string(i) + "] must be an integer from " +
                                                   std::to_string(low) + " to " + std::to_string(high));
    }
    out.push_back(static_cast<int>(d));
  }
  return out;
}

uint64_t signalSet(const std::vector<int>& signals) {
  uint64_t set = 0;
  for (int s : signals) set |= uint64_t{1} << (s - 1);
  return set;
}

}  // namespace

Napi::Value ExecProgram(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const std::string path = requireString(info[0], "path");
  const std::vector<std::string> argv = requireStrings(info[1], "argv");
  if (argv.empty()) throw Napi::TypeError::New(env, "argv must not be empty");
  const std::vector<std::string> environment = requireStrings(info[2], "env");
  if (!info[3].IsObject()) throw Napi::TypeError::New(env, "state must be an object");
  const Napi::Object given = info[3].As<Napi::Object>();
  os::ExecState state;
  state.ignoredSignals = signalSet(requireInts(given.Get("ignored"), "state.ignored", 1, 64));
  state.blockedSignals = signalSet(requireInts(given.Get("blocked"), "state.blocked", 1, 64));
  state.inheritedDescriptors = requireInts(given.Get("inherited"), "state.inherited", 0, 1 << 30);
  const Napi::Value openFiles = given.Get("openFiles");
  if (!openFiles.IsUndefined()) {
    const double d = openFiles.IsNumber() ? openFiles.As<Napi::Number>().DoubleValue() : -2;
    if (!(d == -1 || (d >= 0 && d <= 9007199254740992.0 && static_cast<double>(static_cast<uint64_t>(d)) == d))) {
      throw Napi::RangeError::New(env, "state.openFiles must be a non-negative integer, or -1 for unlimited");
    }
    state.setOpenFiles = true;
    state.openFilesSoft = d == -1 ? UINT64_MAX : static_cast<uint64_t>(d);
  }
  return Napi::Number::New(env, os::execProgram(path, argv, environment, state));
}

}  // namespace tp::napi

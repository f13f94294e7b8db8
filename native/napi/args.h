// Uniform argument checks for the binding. The TypeScript layer validates everything users pass and turns
// it into exact shapes; these checks are the second line, so a wrong call from JS can never reach the core
// with garbage. Each one throws a TypeError naming the argument.
#pragma once

#include <napi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

namespace tp::napi {

// Counters cross into JS as numbers: exact up to 2^53, far above any count or byte total here.
inline void setNumber(Napi::Object& object, const char* key, uint64_t value) {
  object.Set(key, Napi::Number::New(object.Env(), static_cast<double>(value)));
}

inline Napi::Error errorWithCode(Napi::Env env, const char* code, const std::string& message) {
  Napi::Error error = Napi::Error::New(env, message);
  error.Set("code", Napi::String::New(env, code));
  return error;
}

// A non-negative integer number up to 2^53 (exact in a double).
inline uint64_t requireUint(const Napi::Value& value, const char* name) {
  if (!value.IsNumber()) throw Napi::TypeError::New(value.Env(), std::string(name) + " must be a number");
  const double d = value.As<Napi::Number>().DoubleValue();
  if (!(d >= 0) || d > 9007199254740992.0 || std::floor(d) != d) {
    throw Napi::TypeError::New(value.Env(), std::string(name) + " must be a non-negative integer");
  }
  return static_cast<uint64_t>(d);
}

inline uint64_t requireUintArg(const Napi::CallbackInfo& info, size_t index, const char* name) {
  return requireUint(info[index], name);
}

inline Napi::Object requireObjectArg(const Napi::CallbackInfo& info, size_t index, const char* name) {
  if (!info[index].IsObject()) throw Napi::TypeError::New(info.Env(), std::string(name) + " must be an object");
  return info[index].As<Napi::Object>();
}

inline Napi::ArrayBuffer requireArrayBufferArg(const Napi::CallbackInfo& info, size_t index, const char* name) {
  if (!info[index].IsArrayBuffer()) {
    throw Napi::TypeError::New(info.Env(), std::string(name) + " must be an ArrayBuffer");
  }
  return info[index].As<Napi::ArrayBuffer>();
}

inline bool optionalBool(const Napi::Object& object, const char* key, bool fallback) {
  Napi::Value value = object.Get(key);
  if (value.IsUndefined()) return fallback;
  if (!value.IsBoolean()) throw Napi::TypeError::New(object.Env(), std::string(key) + " must be a boolean");
  return value.As<Napi::Boolean>().Value();
}

inline uint64_t optionalUint(const Napi::Object& object, const char* key, uint64_t fallback) {
  Napi::Value value = object.Get(key);
  return value.IsUndefined() ? fallback : requireUint(value, key);
}

// A Float64Array of non-negative integers (how JS hands arrays of sizes and counts to the core).
template <typename Fn>
inline void forEachUint(const Napi::Value& value, const char* name, Fn fn) {
  if (!value.IsTypedArray() || value.As<Napi::TypedArray>().TypedArrayType() != napi_float64_array) {
    throw Napi::TypeError::New(value.Env(), std::string(name) + " must be a Float64Array");
  }
  Napi::Float64Array array = value.As<Napi::Float64Array>();
  for (size_t i = 0; i < array.ElementLength(); ++i) {
    const double d = array[i];
    if (!(d >= 0) || d > 9007199254740992.0 || std::floor(d) != d) {
      throw Napi::TypeError::New(value.Env(), std::string(name) + "[" + std::to_string(i) +
                                                  "] must be a non-negative integer");
    }
    fn(i, static_cast<uint64_t>(d));
  }
}

}  // namespace tp::napi

namespace tp::napi {

inline Napi::Float64Array requireFloat64ArrayArg(const Napi::CallbackInfo& info, size_t index, const char* name) {
  const Napi::Value value = info[index];
  if (!value.IsTypedArray() || value.As<Napi::TypedArray>().TypedArrayType() != napi_float64_array) {
    throw Napi::TypeError::New(info.Env(), std::string(name) + " must be a Float64Array");
  }
  return value.As<Napi::Float64Array>();
}

// Lifetimes handed to the planners: same length, sizes positive integers, 0 <= start <= end, all exact
// doubles (< 2^53). The core casts these to integers, so a NaN or a negative here would be undefined
// behaviour there: they are refused here instead.
inline void requireLifetimes(Napi::Env env, const Napi::Float64Array& sizes, const Napi::Float64Array& starts,
                             const Napi::Float64Array& ends) {
  const size_t n = sizes.ElementLength();
  if (starts.ElementLength() != n || ends.ElementLength() != n) {
    throw Napi::TypeError::New(env, "sizes, starts and ends must have the same length");
  }
  for (size_t i = 0; i < n; ++i) {
    const double size = sizes[i], start = starts[i], end = ends[i];
    if (!(size >= 1 && size <= 9007199254740992.0 && std::floor(size) == size)) {
      throw Napi::RangeError::New(env, "sizes[" + std::to_string(i) + "] must be a positive integer");
    }
    if (!(start >= 0 && end >= start && end <= 9007199254740992.0)) {
      throw Napi::RangeError::New(env, "lifetime " + std::to_string(i) + " must satisfy 0 <= start <= end");
    }
  }
}

}  // namespace tp::napi

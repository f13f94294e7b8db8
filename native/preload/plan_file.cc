#include "plan_file.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <vector>

namespace tp::preload {

namespace {

// Just enough JSON for a plan file: objects, arrays, numbers, strings, true/false/null.
struct Json {
  enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
  double number = 0;
  std::string text;
  std::vector<Json> items;
  std::map<std::string, Json> fields;

  const Json* get(const char* key) const {
    auto it = fields.find(key);
    return it == fields.end() ? nullptr : &it->second;
  }
};

class Parser {
 public:
  explicit Parser(const std::string& text) : s_(text) {}

  bool parse(Json* out, std::string* error) {
    if (!value(out, 0) || (skip(), pos_ != s_.size())) {
      *error = "not valid JSON at byte " + std::to_string(pos_);
      return false;
    }
    return true;
  }

 private:
  static constexpr int kMaxDepth = 64;

  void skip() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\t')) ++pos_;
  }
  bool literal(const char* word) {
    const size_t n = strlen(word);
    if (s_.compare(pos_, n, word) != 0) return false;
    pos_ += n;
    return true;
  }
  bool string(std::string* out) {
    if (s_[pos_] != '"') return false;
    for (++pos_; pos_ < s_.size(); ++pos_) {
      const char c = s_[pos_];
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (c == '\\') {
        if (++pos_ >= s_.size()) return false;
        const char e = s_[pos_];
        if (e == 'u') {
          if (pos_ + 4 >= s_.size()) return false;
          pos_ += 4;  // plan files carry no escaped characters we need: keep a placeholder
          out->push_back('?');
        } else {
          out->push_back(e == 'n' ? '\n' : e == 't' ? '\t' : e);
        }
      } else {
        out->push_back(c);
      }
    }
    return false;
  }
  bool value(Json* out, int depth) {
    skip();
    if (pos_ >= s_.size() || depth > kMaxDepth) return false;
    const char c = s_[pos_];
    if (c == '{') {
      out->kind = Json::Object;
      ++pos_;
      skip();
      if (pos_ < s_.size() && s_[pos_] == '}') return ++pos_, true;
      for (;;) {
        skip();
        std::string key;
        if (pos_ >= s_.size() || !string(&key)) return false;
        skip();
        if (pos_ >= s_.size() || s_[pos_++] != ':') return false;
        if (!value(&out->fields[key], depth + 1)) return false;
        skip();
        if (pos_ >= s_.size()) return false;
        if (s_[pos_] == ',') { ++pos_; continue; }
        if (s_[pos_] == '}') return ++pos_, true;
        return false;
      }
    }
    if (c == '[') {
      out->kind = Json::Array;
      ++pos_;
      skip();
      if (pos_ < s_.size() && s_[pos_] == ']') return ++pos_, true;
      for (;;) {
        out->items.emplace_back();
        if (!value(&out->items.back(), depth + 1)) return false;
        skip();
        if (pos_ >= s_.size()) return false;
        if (s_[pos_] == ',') { ++pos_; continue; }
        if (s_[pos_] == ']') return ++pos_, true;
        return false;
      }
    }
    if (c == '"') return out->kind = Json::String, string(&out->text);
    if (literal("true")) return out->kind = Json::Bool, out->number = 1, true;
    if (literal("false")) return out->kind = Json::Bool, true;
    if (literal("null")) return true;
    const char* start = s_.c_str() + pos_;
    char* end = nullptr;
    errno = 0;
    out->number = strtod(start, &end);
    if (end == start || errno == ERANGE) return false;
    out->kind = Json::Number;
    pos_ += static_cast<size_t>(end - start);
    return true;
  }

  const std::string& s_;
  size_t pos_ = 0;
};

constexpr double kMaxBytes = 140737488355328.0;  // 2^47, the pool's largest request
constexpr long kMaxFileBytes = 256L << 20;

bool readFile(const char* path, std::string* text, std::string* error) {
  FILE* f = fopen(path, "rb");
  if (!f) {
    *error = std::string("cannot read the plan: ") + strerror(errno);
    return false;
  }
  std::unique_ptr<FILE, int (*)(FILE*)> closer(f, fclose);
  char buf[1 << 16];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
    text->append(buf, n);
    if (text->size() > static_cast<size_t>(kMaxFileBytes)) {
      *error = "the plan is larger than 256 MiB";
      return false;
    }
  }
  if (ferror(f)) {
    *error = std::string("cannot read the plan: ") + strerror(errno);
    return false;
  }
  return true;
}

// A whole number in [min, kMaxBytes], or false with *error naming `field`.
bool integer(const Json* v, const std::string& field, double min, uint64_t* out, std::string* error) {
  if (!v || v->kind != Json::Number || v->number != std::floor(v->number) || v->number < min || v->number > kMaxBytes) {
    *error = field + " must be a whole number from " + std::to_string(static_cast<uint64_t>(min)) + " to 2^47";
    return false;
  }
  *out = static_cast<uint64_t>(v->number);
  return true;
}

// An array of whole numbers in [min, 2^47], each passed to `take`; false with *error naming `field`.
template <typename Take>
bool integers(const Json* array, const std::string& field, double min, std::string* error, Take&& take) {
  if (!array || array->kind != Json::Array) {
    *error = field + " must be an array";
    return false;
  }
  for (size_t i = 0; i < array->items.size(); ++i) {
    uint64_t value;
    if (!integer(&array->items[i], field + "[" + std::to_string(i) + "]", min, &value, error)) return false;
    take(i, value);
  }
  return true;
}

// Version 2's layout (time-shared blocks): { classes, offsets }, classes named as the file gives them.
// SizeClassTable::build checks the rest (offsets aligned, blocks per class).
bool layoutFromJson(const Json* layout, const std::vector<uint32_t>& position, PlanSpec* plan, std::string* error) {
  if (!layout || layout->kind == Json::Null) return true;
  bool fits = true;
  if (!integers(layout->get("classes"), "layout.classes", 0, error, [&](size_t, uint64_t cls) {
        fits = fits && cls < position.size();
        plan->layout.push_back({fits ? position[cls] : 0, 0});
      })) {
    return false;
  }
  if (!fits) {
    *error = "layout.classes names a class the plan does not have";
    return false;
  }
  const Json* offsets = layout->get("offsets");
  if (!offsets || offsets->kind != Json::Array || offsets->items.size() != plan->layout.size()) {
    *error = "layout must be { classes, offsets }: two arrays of one length";
    return false;
  }
  return integers(offsets, "layout.offsets", 0, error, [&](size_t b, uint64_t offset) { plan->layout[b].offset = offset; });
}

// Version 2's schedule.blocks, schedule.iterations and schedule.cycle.
bool scheduleExtrasFromJson(const Json& schedule, PlanSpec* plan, std::string* error) {
  const Json* blocks = schedule.get("blocks");
  if (blocks && blocks->kind != Json::Null) {
    if (blocks->kind != Json::Array || blocks->items.size() != plan->schedule.size()) {
      *error = "schedule.blocks must be an array as long as schedule.sizes";
      return false;
    }
    if (!integers(blocks, "schedule.blocks", 0, error, [&](size_t k, uint64_t block) {
          plan->schedule[k].block = static_cast<uint32_t>(std::min<uint64_t>(block, ScheduleEntry::kAnyBlock - 1));
        })) {
      return false;
    }
  }
  const Json* cycle = schedule.get("cycle");
  if (cycle && cycle->kind != Json::Null && !integer(cycle, "schedule.cycle", 1, &plan->cycle, error)) return false;
  const Json* iterations = schedule.get("iterations");
  if (!iterations || iterations->kind == Json::Null) return true;
  return integers(iterations, "schedule.iterations", 0, error, [&](size_t, uint64_t start) { plan->iterationStarts.push_back(start); });
}

bool fromJson(const Json& root, PlanSpec* plan, std::string* error) {
  const Json* format = root.get("format");
  if (root.kind != Json::Object || !format || format->kind != Json::String || format->text != "tensorpool-plan") {
    *error = "format: not a tensorpool plan (\"format\": \"tensorpool-plan\" expected)";
    return false;
  }
  const Json* version = root.get("version");
  if (!version || version->kind != Json::Number || (version->number != 1 && version->number != 2)) {
    *error = "version: this tensorpool reads plan versions 1 and 2";
    return false;
  }
  if (!integer(root.get("interval"), "interval", 1, &plan->interval, error)) return false;
  const Json* classes = root.get("classes");
  if (!classes || classes->kind != Json::Array || classes->items.empty() || classes->items.size() > 65535) {
    *error = "classes must be an array of 1 to 65535 { size, blocks }";
    return false;
  }
  std::vector<PlanClass> given;
  for (size_t i = 0; i < classes->items.size(); ++i) {
    const std::string at = "classes[" + std::to_string(i) + "]";
    PlanClass c{};
    if (!integer(classes->items[i].get("size"), at + ".size", 1, &c.size, error)) return false;
    if (!integer(classes->items[i].get("blocks"), at + ".blocks", 0, &c.blocks, error)) return false;
    given.push_back(c);
  }
  std::vector<uint32_t> order(given.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return given[a].size < given[b].size; });
  std::vector<uint32_t> position(given.size());
  for (uint32_t p = 0; p < order.size(); ++p) {
    plan->classes.push_back(given[order[p]]);
    position[order[p]] = p;
  }
  if (!layoutFromJson(root.get("layout"), position, plan, error)) return false;
  const Json* schedule = root.get("schedule");
  if (!schedule || schedule->kind == Json::Null) return true;
  const Json* sizes = schedule->get("sizes");
  const Json* indexes = schedule->get("classes");
  if (!sizes || !indexes || sizes->kind != Json::Array || indexes->kind != Json::Array ||
      sizes->items.size() != indexes->items.size()) {
    *error = "schedule must be { sizes, classes }: two arrays of one length";
    return false;
  }
  plan->schedule.reserve(sizes->items.size());
  for (size_t k = 0; k < sizes->items.size(); ++k) {
    uint64_t size, cls;
    if (!integer(&sizes->items[k], "schedule.sizes[" + std::to_string(k) + "]", 1, &size, error)) return false;
    if (!integer(&indexes->items[k], "schedule.classes[" + std::to_string(k) + "]", 0, &cls, error)) return false;
    if (cls >= given.size()) {
      *error = "schedule.classes[" + std::to_string(k) + "] names class " + std::to_string(cls) + " of " +
               std::to_string(given.size());
      return false;
    }
    plan->schedule.push_back({size, position[cls]});
  }
  return scheduleExtrasFromJson(*schedule, plan, error);
}

}  // namespace

bool readPlanFile(const char* path, PlanSpec* plan, std::string* program, std::string* error) {
  std::string text;
  Json root;
  std::string why;
  // The table is built here only to check the plan (its classes, schedule and layout), so that a plan the
  // pool would refuse when first made is named, and refused, at load.
  SizeClassTable checked;
  if (!readFile(path, &text, &why) || !Parser(text).parse(&root, &why) || !fromJson(root, plan, &why) ||
      !checked.build(*plan, &why)) {
    *error = std::string(path) + ": " + why;
    return false;
  }
  const Json* source = root.get("source");
  const Json* named = source && source->kind == Json::Object ? source->get("program") : nullptr;
  program->clear();
  if (named && named->kind == Json::String) *program = named->text;
  return true;
}

}  // namespace tp::preload

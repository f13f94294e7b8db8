#include "plan_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <string_view>
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

// Parses JSON text; `out` null skips a value without building it (how a file's program is found without
// parsing its body). The text need not end in a NUL: nothing reads past its end.
class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  bool parse(Json* out, std::string* error) {
    if (!value(out, 0) || (skip(), pos_ != s_.size())) return failed(error);
    return true;
  }

  // The top-level object's source.program when it is a string (*out empty otherwise), every other value
  // skipped: a plan's program is known before its body is parsed.
  bool sourceProgram(std::string* out, std::string* error) {
    out->clear();
    skip();
    if (!at('{')) return failed(error);
    return members(0, [&](const std::string& key) {
      if (key != "source" || (skip(), !at('{'))) return value(nullptr, 1);
      return members(1, [&](const std::string& inner) {
        if (inner != "program" || (skip(), !at('"'))) return value(nullptr, 2);
        return string(out);
      });
    }) || failed(error);
  }

 private:
  static constexpr int kMaxDepth = 64;

  bool failed(std::string* error) const {
    *error = "not valid JSON at byte " + std::to_string(pos_);
    return false;
  }
  bool at(char c) const { return pos_ < s_.size() && s_[pos_] == c; }
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
    if (!at('"')) return false;
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
          if (out) out->push_back('?');
        } else if (out) {
          out->push_back(e == 'n' ? '\n' : e == 't' ? '\t' : e);
        }
      } else if (out) {
        out->push_back(c);
      }
    }
    return false;
  }
  // An object's members after its '{' up to its '}', each value read by member(key) (false: invalid).
  template <typename Member>
  bool members(int depth, Member&& member) {
    if (depth > kMaxDepth) return false;
    ++pos_;
    skip();
    if (at('}')) return ++pos_, true;
    for (std::string key;; key.clear()) {
      skip();
      if (!string(&key)) return false;
      skip();
      if (!at(':')) return false;
      ++pos_;
      if (!member(key)) return false;
      skip();
      if (at(',')) { ++pos_; continue; }
      if (at('}')) return ++pos_, true;
      return false;
    }
  }
  bool number(Json* out) {
    char digits[64];  // copied: strtod needs a NUL, and the text may end right after the number
    size_t n = 0;
    while (pos_ + n < s_.size() && n < sizeof digits - 1 && s_[pos_ + n] != '\0' && strchr("+-0123456789.eE", s_[pos_ + n])) {
      digits[n] = s_[pos_ + n];
      ++n;
    }
    digits[n] = '\0';
    char* end = nullptr;
    errno = 0;
    const double value = strtod(digits, &end);
    if (end == digits || errno == ERANGE) return false;
    pos_ += static_cast<size_t>(end - digits);
    if (out) out->kind = Json::Number, out->number = value;
    return true;
  }
  bool value(Json* out, int depth) {
    skip();
    if (pos_ >= s_.size() || depth > kMaxDepth) return false;
    const char c = s_[pos_];
    if (c == '{') {
      if (out) out->kind = Json::Object;
      return members(depth, [&](const std::string& key) { return value(out ? &out->fields[key] : nullptr, depth + 1); });
    }
    if (c == '[') {
      if (out) out->kind = Json::Array;
      ++pos_;
      skip();
      if (at(']')) return ++pos_, true;
      for (;;) {
        if (out) out->items.emplace_back();
        if (!value(out ? &out->items.back() : nullptr, depth + 1)) return false;
        skip();
        if (at(',')) { ++pos_; continue; }
        if (at(']')) return ++pos_, true;
        return false;
      }
    }
    if (c == '"') {
      if (out) out->kind = Json::String;
      return string(out ? &out->text : nullptr);
    }
    if (literal("true")) {
      if (out) out->kind = Json::Bool, out->number = 1;
      return true;
    }
    if (literal("false")) {
      if (out) out->kind = Json::Bool;
      return true;
    }
    if (literal("null")) return true;
    return number(out);
  }

  std::string_view s_;
  size_t pos_ = 0;
};

constexpr double kMaxBytes = 140737488355328.0;  // 2^47, the pool's largest request
constexpr off_t kMaxFileBytes = off_t{256} << 20;

// A plan file mapped read-only: a regular file of at most kMaxFileBytes (a FIFO, a device or /dev/zero is
// refused by its type, before anything is read).
class MappedFile {
 public:
  bool open(const char* path, std::string* error) {
    const int fd = ::open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return fail(std::string("cannot read the plan: ") + strerror(errno), error);
    struct stat st;
    const bool stated = fstat(fd, &st) == 0;
    const int err = errno;
    if (stated && S_ISREG(st.st_mode) && st.st_size > 0 && st.st_size <= kMaxFileBytes) {
      length_ = static_cast<size_t>(st.st_size);
      void* at = mmap(nullptr, length_, PROT_READ, MAP_PRIVATE, fd, 0);
      data_ = at == MAP_FAILED ? nullptr : static_cast<const char*>(at);
    }
    const int mapErr = errno;
    close(fd);
    if (!stated) return fail(std::string("cannot read the plan: ") + strerror(err), error);
    if (!S_ISREG(st.st_mode)) return fail("not a regular file: a plan is a file that 'tensorpool train' wrote", error);
    if (st.st_size == 0) return fail("the file is empty", error);
    if (st.st_size > kMaxFileBytes) {
      return fail("the file is " + std::to_string(st.st_size) + " bytes; a plan may be at most 256 MiB", error);
    }
    if (!data_) return fail(std::string("cannot read the plan: ") + strerror(mapErr), error);
    return true;
  }
  ~MappedFile() {
    if (data_) munmap(const_cast<char*>(data_), length_);
  }
  std::string_view text() const { return {data_, length_}; }

 private:
  static bool fail(const std::string& why, std::string* error) { return *error = why, false; }
  const char* data_ = nullptr;
  size_t length_ = 0;
};

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
  std::string outside;  // the first class named that the plan does not have
  if (!integers(layout->get("classes"), "layout.classes", 0, error, [&](size_t b, uint64_t cls) {
        if (cls >= position.size() && outside.empty()) {
          outside = "layout.classes[" + std::to_string(b) + "] names class " + std::to_string(cls) + " of " + std::to_string(position.size());
        }
        plan->layout.push_back({cls < position.size() ? position[cls] : 0, 0});
      })) {
    return false;
  }
  if (!outside.empty()) {
    *error = outside;
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

// Version 3's `serve`: "classes" (absent: the plan's blocks) or "spans" (the default classes' spans, with
// `spans.reserve` bytes carved up front and kept once written: PlanSpec::spanReserve).
bool serveFromJson(const Json& root, double version, PlanSpec* plan, bool* spans, std::string* error) {
  const Json* serve = root.get("serve");
  *spans = false;
  if (!serve || serve->kind == Json::Null) {
    if (!root.get("spans")) return true;
    *error = "spans: only a plan that says \"serve\": \"spans\" has it";
    return false;
  }
  if (version < 3) {
    *error = "serve: a version " + std::to_string(static_cast<int>(version)) + " plan has no serve field (it came with version 3)";
    return false;
  }
  if (serve->kind != Json::String || (serve->text != "classes" && serve->text != "spans")) {
    *error = "serve must be \"classes\" or \"spans\"";
    return false;
  }
  const Json* spansField = root.get("spans");
  if (serve->text == "classes") {
    if (!spansField) return true;
    *error = "spans: only a plan that says \"serve\": \"spans\" has it";
    return false;
  }
  if (!spansField || spansField->kind != Json::Object) {
    *error = "spans must be an object { reserve } in a plan that says \"serve\": \"spans\"";
    return false;
  }
  if (!integer(spansField->get("reserve"), "spans.reserve", 0, &plan->spanReserve, error)) return false;
  if (plan->spanReserve > (uint64_t{1} << 40)) {
    *error = "spans.reserve must be at most 2^40 bytes (1 TiB)";
    return false;
  }
  *spans = true;
  return true;
}

bool fromJson(const Json& root, PlanSpec* plan, bool* spans, std::string* error) {
  const Json* format = root.get("format");
  if (root.kind != Json::Object || !format || format->kind != Json::String || format->text != "tensorpool-plan") {
    *error = "format: not a tensorpool plan (\"format\": \"tensorpool-plan\" expected)";
    return false;
  }
  const Json* version = root.get("version");
  if (!version || version->kind != Json::Number || (version->number != 1 && version->number != 2 && version->number != 3)) {
    *error = "version: this tensorpool reads plan versions 1, 2 and 3";
    return false;
  }
  if (!serveFromJson(root, version->number, plan, spans, error)) return false;
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

bool readPlanFile(const char* path, const std::string& running, PlanSpec* plan, bool* spans, std::string* program,
                  std::string* error) {
  MappedFile file;
  Json root;
  std::string why;
  // The program first (no tree built): in the other processes of the tree the body is never parsed.
  if (!file.open(path, &why) || !Parser(file.text()).sourceProgram(program, &why)) {
    *error = std::string(path) + ": " + why;
    return false;
  }
  if (!program->empty() && !running.empty() && *program != running) return true;
  // The table is built here only to check the plan (its classes, schedule and layout), so that a plan the
  // pool would refuse when first made is named, and refused, at load.
  SizeClassTable checked;
  if (!Parser(file.text()).parse(&root, &why) || !fromJson(root, plan, spans, &why) || !checked.build(*plan, &why)) {
    *error = std::string(path) + ": " + why;
    return false;
  }
  return true;
}

}  // namespace tp::preload

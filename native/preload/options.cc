#include "options.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "always_run.h"
#include "core/size_class_pool.h"
#include "text.h"

namespace tp::preload {

const uint64_t kThresholdFloor = SizeClassPool::kSpanFrom;
static_assert(SizeClassPool::kSpanFrom == uint64_t{64} << 10, "the table's help and the refusals below say 64K");

namespace {
constexpr uint64_t kMaxBytes = uint64_t{1} << 47;  // Pool::kMaxRequest: the largest request
constexpr uint64_t kMaxMs = uint64_t{1} << 32;
}  // namespace

const OptionSpec kOptions[] = {
    {Option::MinBytes, "TENSORPOOL_MIN_BYTES", "--min-bytes", OptionKind::Threshold, "64K",
     "requests of at least this many bytes go to the pool, smaller ones to the C library; 64K (the pool's floor) or more"},
    {Option::TestMinBytes, "TENSORPOOL_TEST_MIN_BYTES", nullptr, OptionKind::Bytes, nullptr,
     "for the library's tests only: a threshold from 1 byte, below the floor (small objects then cost several times glibc's)"},
    {Option::Plan, "TENSORPOOL_PLAN", "--plan", OptionKind::Path, nullptr,
     "a plan from 'tensorpool train': its classes and schedule from the start"},
    {Option::Record, "TENSORPOOL_RECORD", "--record", OptionKind::Path, nullptr,
     "the file each process's recording goes to as it ends (%p: its pid)"},
    {Option::RecordEvents, "TENSORPOOL_RECORD_EVENTS", nullptr, OptionKind::Count, "4M", "events a recording holds at most (16 bytes each)"},
    {Option::Adaptive, "TENSORPOOL_ADAPTIVE", "--adaptive", OptionKind::Switch, "0",
     "1: in Node, processPool() records, trains and switches plans at its iteration marks"},
    {Option::Reserve, "TENSORPOOL_RESERVE", nullptr, OptionKind::Bytes, "16G",
     "address space the default classes reserve at first (under ulimit -v an eighth of what it leaves); they grow in place past it"},
    {Option::DecayMs, "TENSORPOOL_DECAY_MS", "--decay", OptionKind::Milliseconds, "1000",
     "free memory idle this long (and for 16 iteration marks, where the program marks them) goes back to the OS; off: never"},
    {Option::DecayThread, "TENSORPOOL_DECAY_THREAD", "--no-decay-thread", OptionKind::Switch, "1",
     "0: no thread of the library's gives decay its turn while a program with threads of its own is quiet"},
    {Option::Stats, "TENSORPOOL_STATS", "--stats", OptionKind::Switch, "0", "1: the pool's counters on stderr as each process ends"},
};
const size_t kOptionCount = sizeof kOptions / sizeof kOptions[0];

const OptionSpec* findOption(const char* name) {
  for (const OptionSpec& spec : kOptions) {
    if (strcmp(spec.name, name) == 0) return &spec;
  }
  return nullptr;
}

namespace {

// The decimal digits `text` starts with, as a number, and where they end (*end, set either way); false where
// they overflow 64 bits. Not strtoull: it and the locale tables it reads would be pages of the C library that
// every program loading the library then holds.
TP_ALWAYS_RUN bool readDecimal(const char* text, uint64_t* value, const char** end) {
  uint64_t n = 0;
  bool fits = true;
  for (; *text >= '0' && *text <= '9'; ++text) {
    const unsigned digit = static_cast<unsigned>(*text - '0');
    if (n > (UINT64_MAX - digit) / 10) fits = false;
    n = n * 10 + digit;
  }
  *value = n;
  *end = text;
  return fits;
}

// "65536", "64K", "16M", "2G" (binary units; "64KiB" and "64KB" too), from 1 to 2^47.
TP_ALWAYS_RUN bool parseBytes(const char* text, uint64_t* out) {
  const char* end = nullptr;
  uint64_t value = 0;
  if (!text || *text < '0' || *text > '9') return false;
  if (!readDecimal(text, &value, &end)) return false;
  unsigned shift = 0;
  if (*end == 'K' || *end == 'k') shift = 10, ++end;
  else if (*end == 'M' || *end == 'm') shift = 20, ++end;
  else if (*end == 'G' || *end == 'g') shift = 30, ++end;
  if (shift && (*end == 'i' || *end == 'I')) ++end;
  if (shift && (*end == 'B' || *end == 'b')) ++end;
  if (*end != '\0' || value == 0 || value > (kMaxBytes >> shift)) return false;
  *out = value << shift;
  return true;
}

// A decimal number from 0 to 2^32, no suffix.
TP_ALWAYS_RUN bool parseMilliseconds(const char* text, uint64_t* out) {
  const char* end = nullptr;
  uint64_t value = 0;
  if (!text || *text < '0' || *text > '9') return false;
  if (!readDecimal(text, &value, &end) || *end != '\0' || value > kMaxMs) return false;
  *out = value;
  return true;
}

TP_ALWAYS_RUN bool parseSwitch(const char* text, uint64_t* out) {
  if (strcmp(text, "1") == 0 || strcmp(text, "true") == 0 || strcmp(text, "on") == 0) return *out = 1, true;
  if (strcmp(text, "0") == 0 || strcmp(text, "false") == 0 || strcmp(text, "off") == 0 || *text == '\0') return *out = 0, true;
  return false;
}

// The line for a refused value: "NAME=text is not ... (such as EXAMPLE)...", `what` before and `after` after
// the example (the option's default, or for one with none its smallest, 1), or `what` alone where `after` is
// null. Out of line and cold: a good value builds no string.
__attribute__((noinline, cold)) bool refused(const OptionSpec& spec, const char* text, const char* what, const char* after,
                                             std::string* error) {
  *error = std::string(spec.name) + "=" + text + " " + what;
  if (after) *error += std::string(spec.fallback ? spec.fallback : "1") + after;
  return false;
}

__attribute__((noinline, cold)) bool refusedAlone(const OptionSpec& spec, const char* what, std::string* error) {
  *error = std::string(spec.name) + what;
  return false;
}

}  // namespace

TP_ALWAYS_RUN bool parseOption(const OptionSpec& spec, const char* text, uint64_t* number, std::string* error) {
  switch (spec.kind) {
    case OptionKind::Bytes:
      return parseBytes(text, number) || refused(spec, text, "is not a byte count from 1 to 2^47 (such as ", ")", error);
    case OptionKind::Threshold:
      if (!parseBytes(text, number)) return refused(spec, text, "is not a byte count from 64K to 2^47 (such as ", ")", error);
      return *number >= kThresholdFloor ||
             refused(spec, text, "is below the pool's floor, 64K (its span size; smaller requests are the C library's)", nullptr, error);
    case OptionKind::Count:
      return parseBytes(text, number) || refused(spec, text, "is not a count (such as ", ")", error);
    case OptionKind::Milliseconds:
      if (strcmp(text, "off") == 0) return *number = kOff, true;
      return parseMilliseconds(text, number) ||
             refused(spec, text, "is not a number of milliseconds (such as ", ") or off", error);
    case OptionKind::Switch:
      return parseSwitch(text, number) || refusedAlone(spec, " must be 1 or 0", error);
    case OptionKind::Path:
      return *text || refusedAlone(spec, " is empty", error);
  }
  return false;
}

TP_ALWAYS_RUN bool readOptions(Options* out, std::string* error) {
  Options read;
  for (const OptionSpec& spec : kOptions) {
    const char* given = getenv(spec.name);
    const char* text = given ? given : spec.fallback;
    if (!text) continue;  // an unset Path
    uint64_t number = 0;
    if (!parseOption(spec, text, &number, error)) return false;
    switch (spec.option) {
      case Option::MinBytes: read.minBytes = number; break;
      case Option::TestMinBytes: read.minBytes = number; break;  // after MinBytes in the table: it wins
      case Option::Plan: read.planPath = text; break;
      case Option::Record: read.recordPath = text; break;
      case Option::RecordEvents: read.recordEvents = number; break;
      case Option::Adaptive: read.adaptive = number != 0; break;
      case Option::Reserve: read.reserveGiven = given != nullptr, read.reserve = number; break;
      case Option::DecayMs: read.decayMs = number; break;
      case Option::DecayThread: read.decayThread = number != 0; break;
      case Option::Stats: read.stats = number != 0; break;
    }
  }
  *out = read;
  return true;
}

TP_ALWAYS_RUN bool claimRoot() {
  const uint64_t pid = static_cast<uint64_t>(getpid());
  const char* root = getenv("TENSORPOOL_ROOT_PID");
  const char* end = nullptr;
  uint64_t value = 0;
  if (root && *root >= '0' && *root <= '9') {
    const bool fits = readDecimal(root, &value, &end);
    if (*end == '\0') return fits && value == pid;
  }
  char text[24];
  Text(text, sizeof text).add(pid);
  setenv("TENSORPOOL_ROOT_PID", text, 1);
  return true;
}

std::string runOf(bool root, uint64_t nowNs) {
  const char* inherited = getenv("TENSORPOOL_RUN");
  if (!root && inherited) return inherited;
  const std::string run = std::to_string(static_cast<long>(getpid())) + "." + std::to_string(nowNs);
  setenv("TENSORPOOL_RUN", run.c_str(), 1);
  return run;
}

bool noteSaid(const char* mark) {
  const char* said = getenv("TENSORPOOL_SAID");
  const std::string before = said ? said : "";
  if (before.find(mark) != std::string::npos) return true;
  // Bounded: a run that keeps finding new things to say keeps the newest few.
  const size_t entry = strlen(mark) + 1;
  const std::string kept = before.size() > 16 * entry ? before.substr(before.size() - 15 * entry) : before;
  setenv("TENSORPOOL_SAID", (kept.empty() ? std::string(mark) : kept + "," + mark).c_str(), 1);
  return false;
}

}  // namespace tp::preload

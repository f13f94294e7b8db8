#include "options.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/size_class_pool.h"

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

// "65536", "64K", "16M", "2G" (binary units; "64KiB" and "64KB" too), from 1 to 2^47.
bool parseBytes(const char* text, uint64_t* out) {
  char* end = nullptr;
  errno = 0;
  if (!text || *text < '0' || *text > '9') return false;
  const unsigned long long value = strtoull(text, &end, 10);
  if (errno == ERANGE) return false;
  unsigned shift = 0;
  if (*end == 'K' || *end == 'k') shift = 10, ++end;
  else if (*end == 'M' || *end == 'm') shift = 20, ++end;
  else if (*end == 'G' || *end == 'g') shift = 30, ++end;
  if (shift && (*end == 'i' || *end == 'I')) ++end;
  if (shift && (*end == 'B' || *end == 'b')) ++end;
  if (*end != '\0' || value == 0 || value > (kMaxBytes >> shift)) return false;
  *out = static_cast<uint64_t>(value) << shift;
  return true;
}

// A decimal number from 0 to 2^32, no suffix.
bool parseMilliseconds(const char* text, uint64_t* out) {
  char* end = nullptr;
  errno = 0;
  if (!text || *text < '0' || *text > '9') return false;
  const unsigned long long value = strtoull(text, &end, 10);
  if (errno == ERANGE || *end != '\0' || value > kMaxMs) return false;
  *out = value;
  return true;
}

bool parseSwitch(const char* text, uint64_t* out) {
  const std::string v = text;
  if (v == "1" || v == "true" || v == "on") return *out = 1, true;
  if (v == "0" || v == "false" || v == "off" || v.empty()) return *out = 0, true;
  return false;
}

bool refused(const OptionSpec& spec, const char* text, const char* what, std::string* error) {
  *error = std::string(spec.name) + "=" + text + " " + what;
  return false;
}

}  // namespace

bool parseOption(const OptionSpec& spec, const char* text, uint64_t* number, std::string* error) {
  const std::string example = spec.fallback ? spec.fallback : "1";  // an option with no default: its smallest
  switch (spec.kind) {
    case OptionKind::Bytes:
      return parseBytes(text, number) ||
             refused(spec, text, ("is not a byte count from 1 to 2^47 (such as " + example + ")").c_str(), error);
    case OptionKind::Threshold:
      if (!parseBytes(text, number)) {
        return refused(spec, text, ("is not a byte count from 64K to 2^47 (such as " + example + ")").c_str(), error);
      }
      return *number >= kThresholdFloor ||
             refused(spec, text, "is below the pool's floor, 64K (its span size; smaller requests are the C library's)", error);
    case OptionKind::Count:
      return parseBytes(text, number) || refused(spec, text, ("is not a count (such as " + example + ")").c_str(), error);
    case OptionKind::Milliseconds:
      if (strcmp(text, "off") == 0) return *number = kOff, true;
      return parseMilliseconds(text, number) ||
             refused(spec, text, ("is not a number of milliseconds (such as " + example + ") or off").c_str(), error);
    case OptionKind::Switch:
      if (parseSwitch(text, number)) return true;
      *error = std::string(spec.name) + " must be 1 or 0";
      return false;
    case OptionKind::Path:
      if (*text) return true;
      *error = std::string(spec.name) + " is empty";
      return false;
  }
  return false;
}

bool readOptions(Options* out, std::string* error) {
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

bool claimRoot() {
  const long pid = static_cast<long>(getpid());
  const char* root = getenv("TENSORPOOL_ROOT_PID");
  char* end = nullptr;
  if (root && *root >= '0' && *root <= '9') {
    const long value = strtol(root, &end, 10);
    if (*end == '\0') return value == pid;
  }
  char text[24];
  snprintf(text, sizeof text, "%ld", pid);
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

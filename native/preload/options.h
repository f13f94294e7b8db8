// The preload library's settings: every TENSORPOOL_* variable it reads, in one table (name, the `tensorpool
// run` option that sets it, its grammar, its default, one line of help), read once, at start-up
// (startup.cc). The addon links this file too: `tensorpool run` checks its options with these parsers and
// lists the table in its --help, so that each grammar is written once.
//
// Also here, the variables the library sets for the processes a program starts (the tree's root, its run,
// what was said): read and written nowhere else.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tp::preload {

// How an option's text is read. Bytes: "65536", "64K", "16M", "2G" (binary units; "64KiB", "64KB" alike), 1 to 2^47. Count: the same
// grammar (a number of events). Threshold: Bytes from kThresholdFloor up. Milliseconds: a decimal number from
// 0 to 2^32, or "off". Switch: "1", "true", "on" or "0", "false", "off", "" (empty: off). Path: any non-empty text.
enum class OptionKind : uint8_t { Bytes, Count, Threshold, Milliseconds, Switch, Path };

// The smallest threshold TENSORPOOL_MIN_BYTES takes: the pool's span size (SizeClassPool::kSpanFrom), from
// which a block any size freed serves the next size. Below it the pool serves small objects worse than the
// C library (docs/benchmarks.md, 'Thresholds below the floor'): only TENSORPOOL_TEST_MIN_BYTES, the tests'
// setting, routes smaller requests to it.
extern const uint64_t kThresholdFloor;

// The value an option of kind Milliseconds has when it is "off".
constexpr uint64_t kOff = UINT64_MAX;

// The options, in the table's order.
enum class Option : uint8_t { MinBytes, TestMinBytes, Plan, Record, RecordEvents, Adaptive, Reserve, DecayMs, DecayThread, Stats };

struct OptionSpec {
  Option option;
  const char* name;      // the variable: "TENSORPOOL_MIN_BYTES"
  const char* flag;      // the `tensorpool run` option that sets it ("--min-bytes"), or nullptr
  OptionKind kind;
  const char* fallback;  // the default as text ("64K"), or nullptr: unset
  const char* help;      // what it does, one line
};

// The table, in the order --help lists it.
extern const OptionSpec kOptions[];
extern const size_t kOptionCount;
// The entry named `name`, or nullptr.
const OptionSpec* findOption(const char* name);

// Parses `text` as the value of `spec`: numbers into *number (Switch: 0 or 1), a Path's text is checked only.
// False with *error, a line that names the variable and what it must be ("TENSORPOOL_DECAY_MS=soon is not a
// number of milliseconds (such as 1000) or off").
bool parseOption(const OptionSpec& spec, const char* text, uint64_t* number, std::string* error);

// What the environment says, every option parsed (defaults where unset).
struct Options {
  uint64_t minBytes = 0;             // TENSORPOOL_TEST_MIN_BYTES where set, else TENSORPOOL_MIN_BYTES
  const char* planPath = nullptr;    // TENSORPOOL_PLAN, or nullptr (pointers into the environment)
  const char* recordPath = nullptr;  // TENSORPOOL_RECORD, or nullptr
  bool reserveGiven = false;         // TENSORPOOL_RESERVE set: taken as it is
  uint64_t reserve = 0;              // its bytes, where given
  uint64_t recordEvents = 0;
  uint64_t decayMs = 0;              // kOff: never
  bool adaptive = false;
  bool stats = false;
  bool decayThread = true;
};

// Reads every option of the table from the environment. False with *error, the line for the first bad one.
// Threads: at start-up, before the program runs (getenv).
bool readOptions(Options* out, std::string* error);

// The process tree the library is loaded in, through variables it sets for the processes a program starts.
// Whether this process is the first of its tree to load the library (TENSORPOOL_ROOT_PID names it, set here
// for the processes it starts; an exec keeps the pid, and the root). A value that is not a pid is unset.
bool claimRoot();
// The run this process belongs to (TENSORPOOL_RUN): the root names it, "pid.time", for the processes it starts.
std::string runOf(bool root, uint64_t nowNs);
// Whether `mark` (16 hexadecimal digits) was said already in this run (TENSORPOOL_SAID), and if not, notes it.
bool noteSaid(const char* mark);

}  // namespace tp::preload

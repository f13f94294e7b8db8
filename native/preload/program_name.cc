#include "program_name.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <string_view>
#include <vector>

namespace tp::preload {

namespace {

bool startsWith(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

bool oneOf(std::string_view s, std::initializer_list<std::string_view> names) {
  for (std::string_view n : names) {
    if (s == n) return true;
  }
  return false;
}

// Node's options that take their value as the next argument (with '=' they take none).
bool nodeTakesValue(std::string_view option) {
  return oneOf(option, {"-r", "--require", "--import", "--loader", "--experimental-loader", "-C", "--conditions", "--env-file",
                        "--inspect-port", "--debug-port", "--title", "--redirect-warnings", "--openssl-config",
                        "--icu-data-dir", "--input-type", "--experimental-policy", "--policy-integrity",
                        "--secure-heap", "--secure-heap-min", "--heapsnapshot-signal", "--diagnostic-dir",
                        "--report-directory", "--report-filename", "--report-signal",
                        "--dns-result-order", "--unhandled-rejections", "--watch-path", "--env-file-if-exists",
                        "--experimental-config-file", "--localstorage-file", "--disable-warning", "--run"});
}

// What the interpreter `exe` runs, from its arguments: {words to name it by}, empty when nothing is named.
// Node: a script, or "-e"/"-p" for inline code. Python: a script, "-m module", or "-c" for inline code.
std::vector<std::string_view> runTarget(std::string_view exe, const std::vector<std::string_view>& args) {
  const bool node = startsWith(exe, "node");
  const bool python = startsWith(exe, "python");
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string_view a = args[i];
    if (a == "--") return i + 1 < args.size() ? std::vector<std::string_view>{args[i + 1]} : std::vector<std::string_view>{};
    if (a.empty() || a[0] != '-' || a == "-") return {a};
    if (node) {
      if (oneOf(a, {"-e", "--eval", "-p", "--print", "-pe"})) return {a == "--eval" ? "-e" : a == "--print" ? "-p" : a};
      if (nodeTakesValue(a)) ++i;
    } else if (python && a == "--check-hash-based-pycs") {
      ++i;
    } else if (python && a[1] != '-') {
      // Python's short options may be grouped (-uX opt, -um module): the first that takes a value ends the
      // group, its value the rest of the argument or the next one.
      for (size_t k = 1; k < a.size(); ++k) {
        const char c = a[k];
        if (c == 'c') return {"-c"};
        if (c == 'm' || c == 'X' || c == 'W' || c == 'Q') {
          std::string_view value = k + 1 < a.size() ? a.substr(k + 1) : (++i < args.size() ? args[i] : std::string_view{});
          if (c == 'm') return {"-m", value};
          break;
        }
      }
    }
  }
  return {};
}

void append(std::string* program, std::string_view word) {
  const size_t slash = word.rfind('/');
  if (slash != std::string_view::npos && !startsWith(word, "-")) word = word.substr(slash + 1);
  if (!program->empty()) *program += ' ';
  for (char c : word) {
    if (program->size() >= 200) return;
    *program += c >= 0x20 && c < 0x7f && c != '"' && c != '\\' && c != ',' ? c : '?';
  }
}

}  // namespace

std::string programName(const char* cmdline, size_t length) {
  std::vector<std::string_view> args;
  for (size_t at = 0; at < length;) {
    const char* end = static_cast<const char*>(memchr(cmdline + at, '\0', length - at));
    const size_t n = (end ? end : cmdline + length) - (cmdline + at);
    args.emplace_back(cmdline + at, n);
    at += n + 1;
  }
  if (args.empty()) return "";
  std::string program;
  append(&program, args[0]);
  const std::string exe = program;
  std::vector<std::string_view> rest(args.begin() + 1, args.end());
  for (std::string_view word : runTarget(exe, rest)) append(&program, word);
  return program;
}

std::string thisProgram() {
  const int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  char buffer[4096];
  size_t length = 0;
  for (ssize_t n; length < sizeof buffer && (n = read(fd, buffer + length, sizeof buffer - length)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    length += static_cast<size_t>(n);
  }
  close(fd);
  return programName(buffer, length);
}

}  // namespace tp::preload

#include "record_file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tp::preload {

namespace {

std::string directoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

// The file a name stands for: an existing path through its symbolic links (the link is kept, its target
// replaced), a new one as given.
std::string resolved(const std::string& path) {
  char real[PATH_MAX];
  return realpath(path.c_str(), real) ? std::string(real) : path;
}

bool failed(const std::string& why, std::string* error) {
  *error = why;
  return false;
}

// Whether the file at `fd` starts with a recording of `run` of at least `length` bytes.
bool holdsLargerOfRun(int fd, const std::string& run, size_t length) {
  struct stat st;
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < length) return false;
  char head[1024];
  const ssize_t n = pread(fd, head, sizeof head - 1, 0);
  if (n <= 0) return false;
  head[n] = '\0';
  const std::string line = "\n# run: " + run + "\n";
  return strstr(head, line.c_str()) != nullptr;
}

bool writeAll(int fd, const char* text, size_t length) {
  for (size_t done = 0; done < length;) {
    const ssize_t n = write(fd, text + done, length - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

bool recordFileUsable(const std::string& given, std::string* error) {
  const std::string path = resolved(given);
  struct stat st;
  if (stat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode)) return failed("not a regular file (a recording is written to a regular file)", error);
  } else if (errno != ENOENT) {
    return failed(strerror(errno), error);
  }
  const std::string dir = directoryOf(path);
  if (access(dir.c_str(), W_OK | X_OK) != 0) return failed(dir + ": " + strerror(errno), error);
  return true;
}

bool writeRecordFile(const std::string& given, const std::string& run, const char* text, size_t length, std::string* error) {
  const std::string path = resolved(given);
  const int dir = open(directoryOf(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return failed(strerror(errno), error);
  bool ok = true;
  if (flock(dir, LOCK_EX) == 0) {
    const int held = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    const bool keep = held >= 0 && holdsLargerOfRun(held, run, length);
    if (held >= 0) close(held);
    if (!keep) {
      const std::string temporary = path + ".tmp." + std::to_string(static_cast<long>(getpid()));
      const int out = open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (out < 0) {
        ok = failed(strerror(errno), error);
      } else {
        bool written = writeAll(out, text, length);
        int err = errno;
        if (close(out) != 0 && written) written = false, err = errno;
        if (written && rename(temporary.c_str(), path.c_str()) != 0) written = false, err = errno;
        if (!written) {
          unlink(temporary.c_str());
          ok = failed(strerror(err), error);
        }
      }
    }
  } else {
    ok = failed(strerror(errno), error);
  }
  close(dir);  // releases the lock
  return ok;
}

}  // namespace tp::preload

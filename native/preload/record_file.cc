#include "record_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "text.h"

namespace tp::preload {

namespace {

std::string directoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

// The directory of `path` into out[capacity]: "." for a bare name, "/" for a file at the root.
void directoryOf(const char* path, char* out, size_t capacity) {
  const char* slash = strrchr(path, '/');
  if (!slash) return void(copyText(out, capacity, "."));
  if (slash == path) return void(copyText(out, capacity, "/"));
  const size_t n = static_cast<size_t>(slash - path) < capacity - 1 ? static_cast<size_t>(slash - path) : capacity - 1;
  memcpy(out, path, n);
  out[n] = '\0';
}

bool failed(const char* why, char* error, size_t capacity) {
  copyText(error, capacity, why);
  return false;
}

// Whether the file at `fd` starts with a recording of `run` (its "# run: <run>" line).
bool ofRun(int fd, const char* run) {
  char head[1024];
  const ssize_t n = pread(fd, head, sizeof head - 1, 0);
  if (n <= 0) return false;
  head[n] = '\0';
  char line[256];
  Text text(line, sizeof line);
  text.add("\n# run: ").add(run).add("\n");
  return !text.overflowed() && strstr(head, line) != nullptr;
}

// Whether the file at `fd` holds a recording of `run` of at least `length` bytes.
bool holdsLargerOfRun(int fd, const char* run, uint64_t length) {
  struct stat st;
  return fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) >= length && ofRun(fd, run);
}

// The file at `path` becomes `path`.old as well (a second name, made under a temporary one and renamed over any
// older .old), so that the rename over `path` that follows leaves it there. Best effort: where no link can be
// made (a file system without them, a full directory), the previous file is only replaced, as before.
void keepAsOld(const char* path) {
  char old[PATH_MAX + 8];
  char linking[PATH_MAX + 40];
  Text oldName(old, sizeof old);
  oldName.add(path).add(".old");
  Text linkingName(linking, sizeof linking);
  linkingName.add(path).add(".old.tmp.").add(static_cast<uint64_t>(getpid()));
  if (oldName.overflowed() || linkingName.overflowed()) return;
  unlink(linking);
  if (link(path, linking) != 0) return;
  if (rename(linking, old) != 0) unlink(linking);
}

}  // namespace

bool recordFileUsable(const std::string& given, std::string* error) {
  char real[PATH_MAX];
  const std::string path = realpath(given.c_str(), real) ? std::string(real) : given;
  struct stat st;
  if (stat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode)) return *error = "not a regular file (a recording is written to a regular file)", false;
  } else if (errno != ENOENT) {
    return *error = strerror(errno), false;
  }
  const std::string dir = directoryOf(path);
  if (access(dir.c_str(), W_OK | X_OK) != 0) return *error = dir + ": " + strerror(errno), false;
  return true;
}

bool openRecordFile(const char* given, RecordFile* file, char* error, size_t capacity) {
  // An existing name through its symbolic links (the link is kept, its target replaced), a new one as given.
  if (!realpath(given, file->path) && !copyText(file->path, sizeof file->path, given)) return failed("the path is too long", error, capacity);
  Text temporary(file->temporary, sizeof file->temporary);
  temporary.add(file->path).add(".tmp.").add(static_cast<uint64_t>(getpid()));
  if (temporary.overflowed()) return failed("the path is too long", error, capacity);
  file->fd = open(file->temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  return file->fd >= 0 || failed(strerror(errno), error, capacity);
}

bool commitRecordFile(RecordFile* file, const char* run, char* error, size_t capacity) {
  struct stat written;
  const bool sized = fstat(file->fd, &written) == 0;
  int err = errno;
  if (close(file->fd) != 0 && sized) err = errno;
  file->fd = -1;
  if (!sized) return unlink(file->temporary), failed(strerror(err), error, capacity);
  char dirPath[PATH_MAX];
  directoryOf(file->path, dirPath, sizeof dirPath);
  const int dir = open(dirPath, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return err = errno, unlink(file->temporary), failed(strerror(err), error, capacity);
  bool ok = true;
  if (flock(dir, LOCK_EX) == 0) {
    const int held = open(file->path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    const bool keep = held >= 0 && holdsLargerOfRun(held, run, static_cast<uint64_t>(written.st_size));
    const bool earlierRun = held >= 0 && !ofRun(held, run);
    if (held >= 0) close(held);
    if (!keep && earlierRun) keepAsOld(file->path);
    if (keep) {
      unlink(file->temporary);
    } else if (rename(file->temporary, file->path) != 0) {
      err = errno;
      unlink(file->temporary);
      ok = failed(strerror(err), error, capacity);
    }
  } else {
    err = errno;
    unlink(file->temporary);
    ok = failed(strerror(err), error, capacity);
  }
  close(dir);  // releases the lock
  return ok;
}

void abandonRecordFile(RecordFile* file) {
  if (file->fd >= 0) close(file->fd);
  file->fd = -1;
  unlink(file->temporary);
}

}  // namespace tp::preload

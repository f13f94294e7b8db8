#include "os/shared_page.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

namespace tp::os {

namespace {

// A new memfd of `bytes`, readable by its owner only; -1 with errno.
int makeFile(const char* name, size_t bytes) {
  int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -1;
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0 || fchmod(fd, 0400) != 0) {
    const int saved = errno;
    close(fd);
    errno = saved;
    return -1;
  }
  return fd;
}

// Seals the file against writes and new writable mappings once this process's mapping exists (kernels before
// 5.1 know no such seal: mode 0400 alone keeps other users' processes out, and root anyway).
void seal(int fd) {
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE | F_SEAL_SHRINK | F_SEAL_GROW) != 0) fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW);
  fcntl(fd, F_ADD_SEALS, F_SEAL_SEAL);
}

// Maps a new page file of `bytes` at `where` (MAP_FIXED) or where the kernel chooses (nullptr); the
// descriptor is closed once mapped. MAP_FAILED with errno.
void* mapNewFile(const char* name, size_t bytes, void* where) {
  const int fd = makeFile(name, bytes);
  if (fd < 0) return MAP_FAILED;
  void* start = mmap(where, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | (where ? MAP_FIXED : 0), fd, 0);
  const int saved = errno;
  if (start != MAP_FAILED) seal(fd);
  close(fd);
  errno = saved;
  return start;
}

}  // namespace

bool makeSharedPage(const char* name, size_t bytes, SharedPage* out) {
  void* start = mapNewFile(name, bytes, nullptr);
  if (start == MAP_FAILED) return false;
  *out = {start, bytes};
  return true;
}

void dropSharedPage(SharedPage* page) {
  munmap(page->start, page->bytes);
  *page = {};
}

bool renewSharedPageInChild(const char* name, SharedPage* page, const void* contents) {
  void* start = mapNewFile(name, page->bytes, page->start);
  if (start == MAP_FAILED) {
    const int saved = errno;
    // Private memory in its place: the child's pool goes on counting where it did, and its parent's page is
    // left alone. (mmap over a range this process maps fails only for want of memory; the pool then stays
    // where it is, sharing its counters with the parent rather than losing them.)
    if (mmap(page->start, page->bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED) {
      memcpy(page->start, contents, page->bytes);
    }
    errno = saved;
    return false;
  }
  memcpy(page->start, contents, page->bytes);
  return true;
}

}  // namespace tp::os

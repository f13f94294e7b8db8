#include "os/shared_page.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

namespace tp::os {

namespace {

// Where the descriptor goes: from half the soft open-files limit, at most 512, up; `fd` itself where that is
// not above it (a limit of 8).
int placeHigh(int fd) {
  struct rlimit limit;
  const rlim_t soft = getrlimit(RLIMIT_NOFILE, &limit) == 0 ? limit.rlim_cur : 0;
  const long from = soft == RLIM_INFINITY || soft > 1024 ? 512 : static_cast<long>(soft / 2);
  if (from <= fd) return fd;
  const int high = fcntl(fd, F_DUPFD_CLOEXEC, static_cast<int>(from));
  if (high < 0) return fd;  // no free descriptor up there: the low one serves
  close(fd);
  return high;
}

// A new memfd of `bytes`, readable by others only, placed high; -1 with errno.
int makeFile(const char* name, size_t bytes, uint64_t* inode) {
  int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -1;
  struct stat st;
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0 || fchmod(fd, 0400) != 0 || fstat(fd, &st) != 0) {
    const int saved = errno;
    close(fd);
    errno = saved;
    return -1;
  }
  *inode = st.st_ino;
  return placeHigh(fd);
}

// Seals the file against writes and new writable mappings once this process's mapping exists (kernels before
// 5.1 know no such seal: mode 0400 alone keeps other users' processes out, and root anyway).
void seal(int fd) {
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE | F_SEAL_SHRINK | F_SEAL_GROW) != 0) fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW);
  fcntl(fd, F_ADD_SEALS, F_SEAL_SEAL);
}

// Whether descriptor `fd` is still the file `inode` names (a memfd: no other file of this process has its inode).
bool stillOurs(int fd, uint64_t inode) {
  struct stat st;
  return fd >= 0 && fstat(fd, &st) == 0 && st.st_ino == inode && S_ISREG(st.st_mode) && st.st_nlink == 0;
}

}  // namespace

bool makeSharedPage(const char* name, size_t bytes, SharedPage* out) {
  uint64_t inode = 0;
  const int fd = makeFile(name, bytes, &inode);
  if (fd < 0) return false;
  void* start = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (start == MAP_FAILED) {
    const int saved = errno;
    close(fd);
    errno = saved;
    return false;
  }
  seal(fd);
  *out = {start, bytes, fd, inode};
  return true;
}

void dropSharedPage(SharedPage* page) {
  munmap(page->start, page->bytes);
  if (stillOurs(page->fd, page->inode)) close(page->fd);
  *page = {};
}

bool renewSharedPageInChild(const char* name, SharedPage* page, const void* contents) {
  if (stillOurs(page->fd, page->inode)) close(page->fd);
  page->fd = -1;
  uint64_t inode = 0;
  const int fd = makeFile(name, page->bytes, &inode);
  void* start = fd < 0 ? MAP_FAILED : mmap(page->start, page->bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
  const int saved = errno;
  if (start == MAP_FAILED) {
    if (fd >= 0) close(fd);
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
  seal(fd);
  page->fd = fd;
  page->inode = inode;
  return true;
}

uint64_t sharedPageTouchedNs(const SharedPage& page) {
  struct stat st;
  if (page.fd < 0 || fstat(page.fd, &st) != 0 || st.st_ino != page.inode) return 0;
  return static_cast<uint64_t>(st.st_mtim.tv_sec) * 1000000000u + static_cast<uint64_t>(st.st_mtim.tv_nsec);
}

}  // namespace tp::os

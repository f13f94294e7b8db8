// A page of this process's memory that other processes of the same user can read, found through /proc: a
// memfd (a file in memory, no path), mapped shared here, its descriptor kept open, so that a reader opens
// /proc/PID/fd/FD (what the kernel allows a process that may read the target's /proc entries: the same user,
// PTRACE_MODE_READ, which Yama's ptrace_scope does not restrict). /proc/PID/map_files/ would need no
// descriptor, but opening it takes CAP_CHECKPOINT_RESTORE, and /proc/PID/mem a ptrace attach.
//
// Others may only read it: the file's mode is 0400 and it is sealed against writes and new writable
// mappings (F_SEAL_FUTURE_WRITE, Linux >= 5.1), so that no other process can change what this one keeps
// there. Its descriptor is close-on-exec and placed high (from half the open-files limit, at most 512, up),
// where a program's own descriptors, taken lowest first, do not reach.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tp::os {

struct SharedPage {
  void* start = nullptr;  // mapped read-write, shared, zero-filled when made
  size_t bytes = 0;
  int fd = -1;            // the descriptor readers open through /proc/PID/fd
  uint64_t inode = 0;     // the file's, to tell it from a descriptor the program has since closed and reused
};

// Makes a page of `bytes` (a multiple of pageSize()) named `name` (shown as /memfd:NAME in /proc/PID/maps and
// /proc/PID/fd). Returns true and fills *out; or false with errno, nothing left open or mapped.
bool makeSharedPage(const char* name, size_t bytes, SharedPage* out);

// Unmaps the page and closes its descriptor (where it is still the page's); *page is empty after.
void dropSharedPage(SharedPage* page);

// In the child of a fork(), whose mapping of the page is its parent's still (shared): the child's own page
// replaces it at the same address, holding `contents` (page->bytes of them, from memory the child does not
// share), and the child's copy of the parent's descriptor is closed (where it is still that file). Where the
// kernel refuses a new page, private memory holding the contents takes its place (nobody can read it then:
// page->fd is -1) and false is returned, errno set. The child never writes into its parent's page.
bool renewSharedPageInChild(const char* name, SharedPage* page, const void* contents);

// The file's last modification time in nanoseconds (its owner, a reader, may set it: futimens), or 0 where
// the descriptor is no longer the page's (the program closed or replaced it).
uint64_t sharedPageTouchedNs(const SharedPage& page);

}  // namespace tp::os

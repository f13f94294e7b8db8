// A page of this process's memory that other processes of the same user can read, found through /proc: a
// memfd (a file in memory, no path), mapped shared here and shown as /memfd:NAME in /proc/PID/maps. No
// descriptor stays open (a program that lists or closes its descriptors sees nothing of it): a reader opens
// /proc/PID/mem at the mapping's address, which the kernel allows a process that may ptrace this one (the same
// user where Yama's ptrace_scope is 0, root otherwise).
//
// The file's mode is 0400 and it is sealed against writes and new writable mappings (F_SEAL_FUTURE_WRITE,
// Linux >= 5.1): nothing but this process's mapping, and a reader allowed to ptrace it, can change it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tp::os {

struct SharedPage {
  void* start = nullptr;  // mapped read-write, shared, zero-filled when made
  size_t bytes = 0;
};

// Makes a page of `bytes` (a multiple of pageSize()) named `name` (shown as /memfd:NAME in /proc/PID/maps).
// Returns true and fills *out; or false with errno, nothing left open or mapped.
bool makeSharedPage(const char* name, size_t bytes, SharedPage* out);

// Unmaps the page; *page is empty after.
void dropSharedPage(SharedPage* page);

// In the child of a fork(), whose mapping of the page is its parent's still (shared): the child's own page
// replaces it at the same address, holding `contents` (page->bytes of them, from memory the child does not
// share). Where the kernel refuses a new page, private memory holding the contents takes its place (no reader
// finds it then) and false is returned, errno set. The child never writes into its parent's page.
bool renewSharedPageInChild(const char* name, SharedPage* page, const void* contents);

}  // namespace tp::os

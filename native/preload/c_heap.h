// The C library's heap beside the pool. Below the threshold the program's memory is the next allocator's
// (glibc's), above it the pool's, and neither reuses what the other has free. Two things keep the pair from
// holding more than glibc alone would:
// - glibc gives the top of its heap back once more of it is free than its trim threshold, which starts at
//   128 KiB and rises, each time glibc frees a chunk it had mapped (up to 32 MiB), to twice that chunk (its
//   mmap threshold to the chunk). The chunks that raised it are now the pool's, so glibc never sees them:
//   its thresholds follow the pool's blocks instead (a fixed threshold would keep free heap that glibc alone
//   gives back).
// - glibc alone serves a large request from memory its small ones freed; the pool cannot. So when the pool
//   takes new memory from the OS, glibc first gives its free pages back (malloc_trim), so that small
//   objects freed and large buffers written after them are not both resident.
// - The other way round: glibc unmaps a large block at free, the pool keeps its pages until decay (1 s idle,
//   and only once the program calls the pool or the C library's malloc). So as glibc's main heap grows past the highest it has
//   been, the pool's free spans give back as much (cHeapTick), so that large blocks freed and small
//   objects written after them are not both resident. Growth past the high-water mark only: a
//   heap that shrinks and grows back to where it was (a training loop's steady state) costs the pool nothing.
#pragma once

#include <cstddef>

namespace tp::preload {

// Reads the user's settings once, at start-up: a threshold set in MALLOC_TRIM_THRESHOLD_,
// MALLOC_MMAP_THRESHOLD_ or GLIBC_TUNABLES is left as it is (cHeapBesidePool then sets none).
void initialiseCHeap();

// The pool served a block of `bytes`; `fresh`: from memory it took from the OS for it (grown, or mapped).
// glibc's thresholds rise to the block as they would have had glibc mapped and freed it, in steps of an
// eighth of a power of two (a few dozen mallopt calls in a process's life at most), never down. After
// fresh memory adds up to an eighth of all the pool took so far (at least 1 MiB), the next allocator's
// malloc_trim(0) runs: a few dozen times while the pool grows to its peak. Lock-free otherwise.
// Pre: no lock of the pool's held (mallopt and malloc_trim take glibc's). errno is left as it was.
void cHeapBesidePool(size_t bytes, bool fresh);

// The main heap's top (sbrk(0): a read of the C library's variable, no system call) against the highest it
// has been: what it grew past it, the pool's free spans give back (poolPurgeSpansFor: that much, at most 64 MiB
// a call; where the pool's lock is held, at a later call). The first call only sets the mark. For moments that
// come often and cost little: every so many of the C library's mallocs. errno is left as it was.
void cHeapTick();
// The heap's top now becomes the mark: what it grew while the pool held nothing free (decay's turns off,
// process_pool.h) is no growth beside the pool's free memory.
void cHeapResync();

}  // namespace tp::preload

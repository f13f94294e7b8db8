// fork() in front of the process pool: what the child inherits of the pool's locks.
#pragma once

namespace tp::preload {

// Registers the fork handlers (once, from the library's constructor): the pool's locks are held across
// fork() so that no child inherits them half-way through a change, taken after stdio's stream-list lock,
// in glibc's own order; a fork from a signal handler that interrupted the pool on the same thread takes none.
void holdPoolAcrossFork();

}  // namespace tp::preload

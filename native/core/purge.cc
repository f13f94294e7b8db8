#include "core/purge.h"

#include <algorithm>
#include <new>

#include "core/header.h"
#include "core/size_class_pool.h"
#include "os/probes.h"

namespace tp {

namespace {
// The probe `purge` (os/probes.h, docs/observability.md): why pages went back to the OS, and how many bytes.
// Called where each reason gave back, never where the decay turn of every alloc and free finds nothing due;
// out of line, so that the code of that turn stays as it was (inlined, it cost the turn two instructions).
__attribute__((noinline, cold)) void probePurge(PurgeReason reason, uint64_t bytes) {
  if (bytes != 0) TP_PROBE2(purge, reason, bytes);
}
}  // namespace

uint64_t purge(SizeClassPool& classes, const PurgeRequest& request, PurgeCounts* counts) {
  const uint64_t before = counts->bytes;
  try {
    switch (request.reason) {
      case PurgeReason::Decay:
        if (classes.hasDuePurges()) {
          classes.purgeDue(request.maxBlocks, request.maxBytes, &counts->blocks, &counts->bytes);
          probePurge(request.reason, counts->bytes - before);
        }
        break;
      case PurgeReason::All:
        classes.purgeAll(&counts->blocks, &counts->bytes);
        probePurge(request.reason, counts->bytes - before);
        break;
      case PurgeReason::MappedBeside:
        classes.purgeSpansFor(std::min(request.bytes, request.maxBytes), &counts->blocks, &counts->bytes);
        probePurge(request.reason, counts->bytes - before);
        break;
      case PurgeReason::HeapBeside:
      case PurgeReason::ArenaGrew:
      case PurgeReason::OsBlock:
        classes.purgeSpanBytes(std::min(request.bytes, request.maxBytes), &counts->blocks, &counts->bytes);
        probePurge(request.reason, counts->bytes - before);
        break;
      case PurgeReason::Moved:
        if (request.block && classes.purgeGiven(request.block)) {
          counts->blocks++;
          counts->bytes += request.block->capacity;
          probePurge(request.reason, request.block->capacity);
        }
        break;
    }
  } catch (const std::bad_alloc&) {
  }
  return counts->bytes - before;
}

}  // namespace tp

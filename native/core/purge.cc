#include "core/purge.h"

#include <algorithm>
#include <new>

#include "core/header.h"
#include "core/size_class_pool.h"

namespace tp {

uint64_t purge(SizeClassPool& classes, const PurgeRequest& request, PurgeCounts* counts) {
  const uint64_t before = counts->bytes;
  try {
    switch (request.reason) {
      case PurgeReason::Decay:
        if (classes.hasDuePurges()) classes.purgeDue(request.maxBlocks, request.maxBytes, &counts->blocks, &counts->bytes);
        break;
      case PurgeReason::All:
        classes.purgeAll(&counts->blocks, &counts->bytes);
        break;
      case PurgeReason::MappedBeside:
        classes.purgeSpansFor(std::min(request.bytes, request.maxBytes), &counts->blocks, &counts->bytes);
        break;
      case PurgeReason::HeapBeside:
        classes.purgeSpanBytes(std::min(request.bytes, request.maxBytes), &counts->blocks, &counts->bytes);
        break;
      case PurgeReason::Moved:
        if (request.block && classes.purgeGiven(request.block)) {
          counts->blocks++;
          counts->bytes += request.block->capacity;
        }
        break;
    }
  } catch (const std::bad_alloc&) {
  }
  return counts->bytes - before;
}

}  // namespace tp

#include "stats_report.h"

#include <unistd.h>

#include <cstdio>
#include <string>

#include "core/pool.h"

namespace tp::preload {

void printStats(const ProcessSettings& settings, Pool* pool) {
  const std::string notFor = settings.planFor.empty() ? ""
                                                       : "; TENSORPOOL_PLAN is for \"" + settings.planFor + "\", this is \"" +
                                                             settings.program + "\": default classes";
  if (!pool) {
    say("process pool (pid " + std::to_string(static_cast<long>(getpid())) + ", " + settings.mode + ", requests >= " +
        std::to_string(settings.minBytes) + " B): served nothing (it was never made)" + notFor);
    return;
  }
  const PoolStats s = pool->stats();
  char line[1024];
  snprintf(line, sizeof line,
           "process pool (pid %ld, %s, requests >= %llu B): allocs %llu, releases %llu, hits %llu, borrows %llu, grown %llu, "
           "OS fallbacks %llu, OS oversize %llu; live %llu blocks / %llu B (peak %llu B); arena %llu B carved, "
           "%llu B committed, %llu B reserved; iterations %llu, switches %llu",
           static_cast<long>(getpid()), settings.mode, static_cast<unsigned long long>(settings.minBytes), static_cast<unsigned long long>(s.allocs),
           static_cast<unsigned long long>(s.releases), static_cast<unsigned long long>(s.hits),
           static_cast<unsigned long long>(s.borrows), static_cast<unsigned long long>(s.grown),
           static_cast<unsigned long long>(s.osFallbacks), static_cast<unsigned long long>(s.osOversize),
           static_cast<unsigned long long>(s.liveBlocks), static_cast<unsigned long long>(s.bytesLive),
           static_cast<unsigned long long>(s.peakBytesLive), static_cast<unsigned long long>(s.arenaBytes),
           static_cast<unsigned long long>(s.committedBytes), static_cast<unsigned long long>(s.reservedBytes),
           static_cast<unsigned long long>(s.iterations), static_cast<unsigned long long>(s.switches));
  std::string more;
  if (s.scheduleHits + s.scheduleMisses > 0) {
    more = "; schedule " + std::to_string(s.scheduleHits) + " hits, " + std::to_string(s.scheduleMisses) + " misses";
  }
  if (settings.spans) more += "; served from spans (the plan's kind)";
  if (s.purgedBlocks > 0) more += "; decay and trim gave back " + std::to_string(s.purgedBytes) + " B in " + std::to_string(s.purgedBlocks) + " blocks and spans";
  if (s.movedToMappings > 0) more += "; realloc moved " + std::to_string(s.movedToMappings) + " blocks to mappings of their own";
  say(line + more + notFor);
}

}  // namespace tp::preload

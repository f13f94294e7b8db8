/**
 * Trace replay against real peers on every shared trace (or the bundled ones): ns/op, steady-state page
 * faults, RSS growth against the lower bound; tensorpool's ratios to the best peer measured in the same run,
 * and the same ratio for `ideal` (planned addresses in a pre-faulted arena, no bookkeeping): the floor any
 * allocator could reach here, since the replay's touching costs the same whoever allocates.
 *
 *   npm run build && npx tsx bench/replay.ts [--reps 30] [--touch pages] [--json out.json] [--traces DIR]
 */
import { replay, type ReplayReport } from '../dist/index.js';
import { isPeer } from '../dist/replay/allocators.js';
import { formatBytes, formatTable, round } from '../dist/report/table.js';
import { benchArgs, benchTraces, printHeader, traceLabel, writeJson } from './harness.js';

const args = benchArgs(30, { traces: { type: 'string' }, touch: { type: 'string' } });
const machine = printHeader('replay: tensorpool vs glibc malloc, jemalloc, mimalloc, tcmalloc');
const traces = benchTraces(args.values.traces as string | undefined);

async function main(): Promise<void> {
const reports: ReplayReport[] = [];
const summary = [];
for (const trace of traces) {
  const report = await replay(trace, {
    reps: args.reps,
    touch: (args.values.touch as 'pages' | 'full' | 'none' | undefined) ?? 'pages',
    onProgress: (done, total) => done === total && console.error(`# ${trace}: ${total} repetitions done`),
  });
  reports.push(report);
  console.log(`\n## ${trace} (lower bound ${formatBytes(report.lowerBoundBytes)}, tensorpool arena ${formatBytes(report.plan!.arenaBytes)})`);
  console.log(
    formatTable(
      ['allocator', 'ns/op', 'alloc ns', 'release ns', 'x best peer', 'minor faults/rep', 'RSS growth', 'x LB'],
      report.results.map((r) =>
        r.available
          ? [r.allocator, round(r.nsPerOp, 0), round(r.allocNs ?? NaN, 0), round(r.releaseNs ?? NaN, 0), round(r.vsBestPeer ?? NaN, 3), round(r.steadyMinorFaultsPerRep, 1), formatBytes(r.rssGrowthBytes), round(r.rssVsLowerBound, 3)]
          : [r.allocator, r.error ?? 'not available', null, null, null, null, null, null],
      ),
    ),
  );
  const ours = report.results.find((r) => r.allocator === 'tensorpool')!;
  const ideal = report.results.find((r) => r.allocator === 'ideal')!;
  const peers = report.results.filter((r) => r.available && isPeer(r.allocator));
  const best = peers.reduce((a, b) => (a.nsPerOp <= b.nsPerOp ? a : b));
  summary.push([
    traceLabel(trace),
    round(ours.steadyMinorFaultsPerRep, 1),
    `${round(ours.vsBestPeer!, 3)} (best: ${best.allocator})`,
    ideal.available ? round(ideal.vsBestPeer!, 3) : null,
    ideal.available ? round(ours.nsPerOp / ideal.nsPerOp, 3) : null,
    round(ours.rssVsLowerBound, 3),
  ]);
}
console.log('\n## targets: 0 faults/rep in steady state; ns/op <= 0.5x the best peer; RSS growth <= 1.3x the lower bound');
console.log(
  formatTable(['trace', 'tensorpool faults/rep', 'ns/op vs best peer', 'ideal vs best peer', 'tensorpool vs ideal', 'RSS growth / LB'], summary),
);
console.log(`# ${args.reps} repetitions per allocator, interleaved; medians of the last half`);
writeJson(args.json, { benchmark: 'replay', machine, reps: args.reps, reports });
}

void main();

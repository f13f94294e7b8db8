/**
 * The preload route (issue: tensorpool as the process allocator): each shared trace (or bundled one)
 * replayed through the C library's malloc family with the preload library in front (`tensorpool-preload`,
 * the process pool on its default classes) next to glibc, jemalloc, mimalloc, tcmalloc and `ideal` (the
 * floor), in one interleaved run; then `node -e 0` start-up with and without the library, interleaved.
 * Targets: 0 faults per repetition in the steady state; ns/op <= 1.10x ideal; start-up overhead <= 5%.
 * Then the threshold sweep that chose TENSORPOOL_MIN_BYTES's default: the preload route against `ideal` in
 * one run per threshold (`--thresholds`, default 4K,16K,64K,256K,1M; set as TENSORPOOL_TEST_MIN_BYTES, the
 * tests' setting, which also takes those below the floor).
 *
 *   npm run build && npx tsx bench/preload.ts [--reps 20] [--starts 30] [--thresholds LIST] [--traces DIR]
 *                                             [--json out.json]
 */
import { spawnSync } from 'node:child_process';

import { preloadLibrary, replay, type AllocatorResult, type ReplayReport } from '../dist/index.js';
import { pairedTime } from '../dist/replay/replay.js';
import { formatBytes, formatInterval, formatTable, round } from '../dist/report/table.js';
import { median } from '../dist/report/stats.js';
import { benchArgs, benchTraces, optionChecks, printHeader, traceLabel, writeJson } from './harness.js';

const args = benchArgs(20, { traces: { type: 'string' }, starts: { type: 'string' }, thresholds: { type: 'string' } });
const checks = optionChecks('preload', args);
const starts = checks.integer('starts', 30);
const thresholds = checks.sizes('thresholds', [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20])!;
const machine = printHeader('preload: the process allocator against the peers and the ideal floor');
const traces = benchTraces(args.values.traces as string | undefined);

/** Wall time of `node -e 0`, ms, with and without the library, alternating, `starts` times each. */
function startup(): { plainMs: number; preloadedMs: number } {
  const time = (env: NodeJS.ProcessEnv) => {
    const t0 = process.hrtime.bigint();
    const r = spawnSync(process.execPath, ['-e', '0'], { env });
    if (r.status !== 0) throw new Error(`node -e 0 failed: ${r.stderr}`);
    return Number(process.hrtime.bigint() - t0) / 1e6;
  };
  const plain: number[] = [];
  const preloaded: number[] = [];
  const base = { ...process.env };
  delete base.LD_PRELOAD;
  for (let i = 0; i < starts; i++) {
    plain.push(time(base));
    preloaded.push(time({ ...base, LD_PRELOAD: preloadLibrary }));
  }
  return { plainMs: median(plain), preloadedMs: median(preloaded) };
}

function pairedCell(r: AllocatorResult, ideal: AllocatorResult): string | null {
  const paired = pairedTime(r, ideal);
  return paired && formatInterval(paired, 3);
}

async function main(): Promise<void> {
  const reports: ReplayReport[] = [];
  const summary = [];
  for (const trace of traces) {
    const report = await replay(trace, {
      reps: args.reps,
      allocators: ['tensorpool-preload', 'malloc', 'jemalloc', 'mimalloc', 'tcmalloc', 'ideal'],
      onProgress: (done, total) => done === total && console.error(`# ${trace}: ${total} repetitions done`),
    });
    reports.push(report);
    const ideal = report.results.find((r) => r.allocator === 'ideal')!;
    console.log(`\n## ${trace} (lower bound ${formatBytes(report.lowerBoundBytes)})`);
    console.log(
      formatTable(
        ['allocator', 'ns/op', 'x ideal', 'x ideal, paired (95% CI)', 'alloc ns', 'release ns', 'minor faults/rep', 'RSS growth', 'x LB'],
        report.results.map((r) =>
          r.available
            ? [r.allocator, round(r.nsPerOp, 0), round(r.nsPerOp / ideal.nsPerOp, 3), pairedCell(r, ideal), round(r.allocNs ?? NaN, 0), round(r.releaseNs ?? NaN, 0), round(r.steadyMinorFaultsPerRep, 1), formatBytes(r.rssGrowthBytes), round(r.rssVsLowerBound, 3)]
            : [r.allocator, r.error ?? 'not available', null, null, null, null, null, null, null],
        ),
      ),
    );
    const ours = report.results.find((r) => r.allocator === 'tensorpool-preload')!;
    summary.push([traceLabel(trace), round(ours.steadyMinorFaultsPerRep, 1), round(ours.nsPerOp / ideal.nsPerOp, 3), pairedCell(ours, ideal), round(ours.rssVsLowerBound, 3)]);
  }
  // The workers inherit this process's environment: one replay per threshold, each against its own ideal.
  // Set as the tests' TENSORPOOL_TEST_MIN_BYTES: TENSORPOOL_MIN_BYTES refuses those below the pool's floor (64K).
  const sweep: (string | number)[][] = [];
  for (const threshold of thresholds) {
    process.env.TENSORPOOL_TEST_MIN_BYTES = String(threshold);
    const row: (string | number)[] = [formatBytes(threshold)];
    for (const trace of traces) {
      const report = await replay(trace, { reps: args.reps, allocators: ['tensorpool-preload', 'ideal'] });
      const [ours, ideal] = ['tensorpool-preload', 'ideal'].map((name) => report.results.find((r) => r.allocator === name)!);
      row.push(round(ours.nsPerOp / ideal.nsPerOp, 3), round(ours.steadyMinorFaultsPerRep, 1), round(ours.rssVsLowerBound, 3));
    }
    sweep.push(row);
  }
  delete process.env.TENSORPOOL_TEST_MIN_BYTES;
  console.log('\n## TENSORPOOL_MIN_BYTES: the preload route vs ideal, faults/rep and RSS growth / LB per trace');
  console.log(formatTable(['threshold', ...traces.flatMap((t) => [`${traceLabel(t)} x ideal`, 'faults/rep', 'x LB'])], sweep));

  const start = startup();
  console.log('\n## targets: 0 faults/rep in steady state; ns/op <= 1.10x ideal; start-up overhead <= 5%');
  console.log(formatTable(['trace', 'preload faults/rep', 'preload vs ideal', 'paired (95% CI)', 'RSS growth / LB'], summary));
  console.log(
    `node -e 0: ${round(start.plainMs, 1)} ms plain, ${round(start.preloadedMs, 1)} ms preloaded ` +
      `(${round((start.preloadedMs / start.plainMs - 1) * 100, 1)}% overhead; medians of ${starts}, alternating)`,
  );
  console.log(`# ${args.reps} repetitions per allocator, interleaved; medians of the last half; paired: each repetition over ideal's`);
  console.log('# of the same round, the median ratio and its 95% distribution-free interval');
  writeJson(args.json, { benchmark: 'preload', machine, reps: args.reps, reports, sweep, startup: start });
}

void main();

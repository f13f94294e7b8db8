/**
 * Adaptive mode on real traces: iterations 1…N of a shared trace (its second step repeated, carry-over
 * re-linked) through two fresh adaptive pools, one switching synchronously (background: false) and one
 * training the plan on a worker thread and building its arena on a libuv thread (background, the default),
 * next to glibc malloc in the same process,
 * iteration by iteration and interleaved. Per iteration: ns per operation (alloc or release, touching a
 * byte per page as a kernel filling the tensor would), minor page faults, and the cost of the
 * markIteration() that ends it (which records, trains and switches). Medians over repetitions.
 *
 * A replayed iteration takes milliseconds, a real training step far longer; while the background pool is
 * training or switching, the loop stands in for that compute by waiting until the work is done (not timed).
 *
 * Then the cost of recording itself: one step replayed through a planned pool with record() on and off,
 * alternating, without touching memory (so that the pool's own work is what is timed).
 *
 *   npm run build && npx tsx bench/adaptive.ts [--reps 5] [--iterations 12] [--touch pages] [--json out.json]
 */
import { Pool, readTrace, repeatIteration, train, type PlanSwitch, type Trace } from '../dist/index.js';
import { native } from '../dist/native.js';
import { nativePoolOf } from '../dist/pool/pool.js';
import { formatBytes, formatTable, round } from '../dist/report/table.js';
import { median } from '../dist/report/stats.js';
import { benchArgs, benchTraces, optionChecks, printHeader, traceLabel, writeJson } from './harness.js';

const args = benchArgs(5, { traces: { type: 'string' }, iterations: { type: 'string' }, touch: { type: 'string' } });
const iterations = Number(args.values.iterations ?? (args.quick ? 8 : 12));
if (!Number.isInteger(iterations) || iterations < 4) {
  console.error(`--iterations must be an integer of at least 4, got ${String(args.values.iterations)}`);
  process.exit(2);
}
const touch = optionChecks('adaptive', args).choice('touch', ['none', 'pages', 'full'] as const, 'pages');
const machine = printHeader('adaptive: a live pool records, trains and switches; next to glibc malloc');

/** One adaptive pool's iteration. */
interface Served {
  nsPerOp: number;
  faults: number;
  markMs: number;
  mode: string;
}

interface Step {
  sync: Served;
  background: Served;
  libcNsPerOp: number;
  libcFaults: number;
}

const MODES = ['sync', 'background'] as const;

/** ns per operation of `step` through a pool planned for it, with and without recording; medians. */
/** Stands for a training step's compute: spins (not timed) while the plan is trained and its arena built in the
 *  background, until the next mark can move on. */
function waitWhileSwitching(pool: Pool): void {
  const deadline = Date.now() + 60_000;
  for (let s = pool.stats().adaptive!; (s.mode === 'training' || s.mode === 'switching') && !s.ready; s = pool.stats().adaptive!) {
    if (Date.now() > deadline) throw new Error(`the background ${s.mode} never finished`);
  }
}

function recordingOverhead(step: Trace, reps: number): { off: number; on: number } {
  const pool = new Pool({ plan: train(step, { order: 'auto' }) });
  const replayer = new native.NativeReplayer(nativePoolOf(pool), step.ops, step.eventBuffer, step.sizes, {
    touch: 'none',
    iterationMarks: false,
  });
  const samples = { off: [] as number[], on: [] as number[] };
  const once = (record: boolean) => {
    if (record) pool.record();
    const r = replayer.run(false);
    if (record) pool.stopRecording();
    samples[record ? 'on' : 'off'].push(r.ns / (r.allocs + r.releases));
  };
  for (let rep = 0; rep < reps; rep++) {
    once(rep % 2 === 0);
    once(rep % 2 === 1);
  }
  pool.close();
  return { off: median(samples.off), on: median(samples.on) };
}

const results = [];
const summary = [];
const overhead = [];
for (const file of benchTraces(args.values.traces as string | undefined)) {
  const recorded = readTrace(file);
  const k = Math.min(2, recorded.iterations);
  const trace = repeatIteration(recorded, k, iterations - k);
  const ends = Array.from({ length: trace.iterations }, (_, i) =>
    i + 1 < trace.iterations ? trace.iterationStarts[i + 1] : trace.eventCount,
  );
  const steps: Step[][] = ends.map(() => []);
  const switches: Record<(typeof MODES)[number], PlanSwitch[]> = { sync: [], background: [] };
  for (let rep = 0; rep < args.reps; rep++) {
    const make = (allocator: ConstructorParameters<typeof native.NativeReplayer>[0]) =>
      new native.NativeReplayer(allocator, trace.ops, trace.eventBuffer, trace.sizes, { touch, iterationMarks: false });
    const pools = MODES.map((mode) => {
      const pool = new Pool({ adaptive: { background: mode === 'background', onSwitch: (event) => switches[mode].push(event) } });
      return { pool, replayer: make(nativePoolOf(pool)) };
    });
    const glibc = make('libc');
    ends.forEach((end, i) => {
      const runs: (() => void)[] = [];
      const out: Partial<Step> = {};
      pools.forEach(({ pool, replayer }, m) =>
        runs.push(() => {
          const mode = pool.stats().adaptive!.mode;
          const r = replayer.runUntil(end, false);
          const t0 = performance.now();
          pool.markIteration();
          out[MODES[m]] = { nsPerOp: r.ns / (r.allocs + r.releases), faults: r.minorFaults, markMs: performance.now() - t0, mode };
        }),
      );
      runs.push(() => {
        const r = glibc.runUntil(end, false);
        out.libcNsPerOp = r.ns / (r.allocs + r.releases);
        out.libcFaults = r.minorFaults;
      });
      for (let r = 0; r < runs.length; r++) runs[(r + rep + i) % runs.length]();
      steps[i].push(out as Step);
      waitWhileSwitching(pools[1].pool);
    });
    for (const { pool, replayer } of pools) {
      replayer.rewind(false);
      pool.close();
    }
    glibc.rewind(false);
  }

  const label = traceLabel(file);
  const switchedAt = { sync: switches.sync[0]?.iteration ?? null, background: switches.background[0]?.iteration ?? null };
  const rows = steps.map((samples, i) => {
    const m = (f: (s: Step) => number) => median(samples.map(f));
    const columns = MODES.flatMap((mode) => {
      const first = samples[0][mode].mode;
      return [
        (first === 'planned' ? 'plan' : first) + (switchedAt[mode] === i + 1 ? ' → switch' : ''),
        round(m((s) => s[mode].nsPerOp), 1),
        m((s) => s[mode].faults),
        round(m((s) => s[mode].markMs), 2),
      ];
    });
    return [i + 1, ...columns, round(m((s) => s.libcNsPerOp), 1), m((s) => s.libcFaults)];
  });
  console.log(`\n## ${label}: iteration ${k} repeated, ${trace.iterations} iterations, ${trace.bufferCount} buffers, touch ${touch}`);
  console.log(
    formatTable(
      ['iteration', 'sync: serves', 'ns/op', 'faults', 'mark ms', 'background: serves', 'ns/op', 'faults', 'mark ms', 'glibc ns/op', 'faults'],
      rows,
    ),
  );
  for (const mode of MODES) {
    const first = switches[mode][0];
    if (!first) continue;
    const ms = (f: (s: PlanSwitch) => number) => round(median(switches[mode].map(f)), 1);
    console.log(
      `# ${mode}: switch after iteration ${first.iteration}; trained in ${ms((s) => s.trainMs)} ms (on the ${first.trainedOn === 'worker' ? 'worker thread' : 'JS thread'}), JS thread busy switching ${ms((s) => s.switchMs)} ms, ` +
        `plan serving ${ms((s) => s.readyMs)} ms after training; arena ${formatBytes(first.plan.arenaBytes)} = ` +
        `${round(first.plan.arenaBytes / trace.iteration(k).lowerBound(), 3)}x the lower bound (${formatBytes(trace.iteration(k).lowerBound())})`,
    );
  }
  // The steady state of the default (background) pool: the iterations after its switch.
  const from = switchedAt.background ?? steps.length;
  const steady = steps.slice(from);
  const all = (f: (s: Step) => number) => median(steady.flatMap((samples) => samples.map(f)));
  const longestMark = (mode: (typeof MODES)[number]) => Math.max(...steps.map((samples) => median(samples.map((s) => s[mode].markMs))));
  summary.push([
    label,
    switchedAt.background ?? 'never',
    steady.length ? round(all((s) => s.background.nsPerOp), 1) : null,
    steady.length ? round(all((s) => s.libcNsPerOp), 1) : null,
    steady.length ? round(all((s) => s.background.nsPerOp) / all((s) => s.libcNsPerOp), 3) : null,
    steady.length ? all((s) => s.background.faults) : null,
    steady.length ? all((s) => s.libcFaults) : null,
    round(longestMark('sync'), 2),
    round(longestMark('background'), 2),
  ]);
  const cost = recordingOverhead(trace.iteration(k), Math.max(20, 4 * args.reps));
  overhead.push([label, round(cost.off, 1), round(cost.on, 1), round(cost.on - cost.off, 1)]);
  const described = (list: PlanSwitch[]) => list.map(({ plan, trace: _t, ...rest }) => ({ ...rest, arenaBytes: plan.arenaBytes }));
  results.push({
    trace: file,
    iterations: trace.iterations,
    switchedAt,
    steps,
    recording: cost,
    switches: { sync: described(switches.sync), background: described(switches.background) },
  });
}

console.log('\n## after the switch (default, background pool; median over the planned iterations and repetitions)');
console.log(
  formatTable(
    ['trace', 'switch after', 'tensorpool ns/op', 'glibc ns/op', 'ratio', 'tensorpool faults/iter', 'glibc faults/iter', 'longest mark ms sync', 'background'],
    summary,
  ),
);
console.log(`# ${args.reps} repetitions, each with fresh adaptive pools; the three allocators take turns going first per iteration`);
console.log('\n## recording: one step through a planned pool, record() off and on alternating, touch none (medians)');
console.log(formatTable(['trace', 'ns/op', 'ns/op recording', 'recording costs ns/op'], overhead));
console.log(
  '# tensorpool faults stay 0 even while its blocks are new: the pool pre-faults pages (MADV_POPULATE_WRITE) as it\n' +
    '# carves them, which the kernel does not count as faults; that work shows as ns/op in iteration 1 and as the\n' +
    "# synchronous switch's mark ms (in the background, on a libuv thread instead). The iteration after a switch also\n" +
    "# returns the old arena's blocks, whose pages go back to the OS.",
);
writeJson(args.json, { benchmark: 'adaptive', machine, reps: args.reps, iterations, touch, results });

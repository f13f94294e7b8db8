/**
 * Adaptive mode on real traces: iterations 1…N of a shared trace (its second step repeated, carry-over
 * re-linked) through a fresh adaptive pool, next to glibc malloc in the same process, iteration by
 * iteration and interleaved. Per iteration: ns per operation (alloc or release, touching a byte per page
 * as a kernel filling the tensor would), minor page faults, and the cost of the markIteration() that ends
 * it (which records, trains and switches). Medians over repetitions.
 *
 * Then the cost of recording itself: one step replayed through a planned pool with record() on and off,
 * alternating, without touching memory (so that the pool's own work is what is timed).
 *
 *   npm run build && npx tsx bench/adaptive.ts [--reps 5] [--iterations 12] [--touch pages] [--json out.json]
 */
import { Pool, readTrace, repeatIteration, train, type PlanSwitch, type Trace } from '../dist/index.js';
import { native } from '../dist/native.js';
import { nativePoolOf } from '../dist/pool.js';
import { formatBytes, formatTable, round } from '../dist/report/table.js';
import { median } from '../dist/report/stats.js';
import { benchArgs, benchTraces, printHeader, traceLabel, writeJson } from './harness.js';

const args = benchArgs(5, { traces: { type: 'string' }, iterations: { type: 'string' }, touch: { type: 'string' } });
const iterations = Number(args.values.iterations ?? (args.quick ? 8 : 12));
if (!Number.isInteger(iterations) || iterations < 4) {
  console.error(`--iterations must be an integer of at least 4, got ${String(args.values.iterations)}`);
  process.exit(2);
}
const touch = (args.values.touch as 'none' | 'pages' | 'full' | undefined) ?? 'pages';
const machine = printHeader('adaptive: a live pool records, trains and switches; next to glibc malloc');

interface Step {
  poolNsPerOp: number;
  libcNsPerOp: number;
  poolFaults: number;
  libcFaults: number;
  markMs: number;
  mode: string;
}

/** ns per operation of `step` through a pool planned for it, with and without recording; medians. */
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
  const switches: PlanSwitch[] = [];
  for (let rep = 0; rep < args.reps; rep++) {
    const pool = new Pool({ adaptive: { onSwitch: (event) => switches.push(event) } });
    const make = (allocator: Parameters<typeof native.NativeReplayer>[0]) =>
      new native.NativeReplayer(allocator, trace.ops, trace.eventBuffer, trace.sizes, { touch, iterationMarks: false });
    const ours = make(nativePoolOf(pool));
    const glibc = make('libc');
    ends.forEach((end, i) => {
      const mode = pool.stats().adaptive!.mode;
      let p = { ns: 0, allocs: 0, releases: 0, minorFaults: 0 };
      let l = p;
      let markMs = 0;
      const runOurs = () => {
        p = ours.runUntil(end, false);
        const t0 = performance.now();
        pool.markIteration();
        markMs = performance.now() - t0;
      };
      const runGlibc = () => (l = glibc.runUntil(end, false));
      if ((rep + i) % 2) {
        runGlibc();
        runOurs();
      } else {
        runOurs();
        runGlibc();
      }
      steps[i].push({
        poolNsPerOp: p.ns / (p.allocs + p.releases),
        libcNsPerOp: l.ns / (l.allocs + l.releases),
        poolFaults: p.minorFaults,
        libcFaults: l.minorFaults,
        markMs,
        mode,
      });
    });
    ours.rewind(false);
    glibc.rewind(false);
    pool.close();
  }

  const label = traceLabel(file);
  const switchedAt = switches[0]?.iteration ?? null;
  const rows = steps.map((samples, i) => {
    const m = (f: (s: Step) => number) => median(samples.map(f));
    const served = samples[0].mode === 'planned' ? 'plan' : `default classes (${samples[0].mode})`;
    return [
      i + 1,
      served + (switchedAt === i + 1 ? ' → switch' : ''),
      round(m((s) => s.poolNsPerOp), 1),
      round(m((s) => s.libcNsPerOp), 1),
      round(m((s) => s.poolNsPerOp) / m((s) => s.libcNsPerOp), 3),
      m((s) => s.poolFaults),
      m((s) => s.libcFaults),
      round(m((s) => s.markMs), 2),
    ];
  });
  const first = switches[0];
  console.log(`\n## ${label}: iteration ${k} repeated, ${trace.iterations} iterations, ${trace.bufferCount} buffers, touch ${touch}`);
  console.log(
    formatTable(['iteration', 'served by', 'tensorpool ns/op', 'glibc ns/op', 'ratio', 'tensorpool faults', 'glibc faults', 'mark ms'], rows),
  );
  if (first) {
    console.log(
      `# switch after iteration ${first.iteration}: trained in ${round(median(switches.map((s) => s.trainMs)), 1)} ms, new arena mapped and pre-faulted in ` +
        `${round(median(switches.map((s) => s.switchMs)), 1)} ms; arena ${formatBytes(first.plan.arenaBytes)} = ` +
        `${round(first.plan.arenaBytes / trace.iteration(k).lowerBound(), 3)}x the lower bound (${formatBytes(trace.iteration(k).lowerBound())})`,
    );
  }
  const steady = steps.slice(switchedAt ?? steps.length);
  const all = (f: (s: Step) => number) => median(steady.flatMap((samples) => samples.map(f)));
  summary.push([
    label,
    switchedAt ?? 'never',
    steady.length ? round(all((s) => s.poolNsPerOp), 1) : null,
    steady.length ? round(all((s) => s.libcNsPerOp), 1) : null,
    steady.length ? round(all((s) => s.poolNsPerOp) / all((s) => s.libcNsPerOp), 3) : null,
    steady.length ? all((s) => s.poolFaults) : null,
    steady.length ? all((s) => s.libcFaults) : null,
  ]);
  const cost = recordingOverhead(trace.iteration(k), Math.max(20, 4 * args.reps));
  overhead.push([label, round(cost.off, 1), round(cost.on, 1), round(cost.on - cost.off, 1)]);
  results.push({ trace: file, iterations: trace.iterations, switchedAt, steps, recording: cost, switches: switches.map(({ plan, trace: _t, ...rest }) => ({ ...rest, arenaBytes: plan.arenaBytes })) });
}

console.log('\n## after the switch (median over the planned iterations and repetitions)');
console.log(formatTable(['trace', 'switch after', 'tensorpool ns/op', 'glibc ns/op', 'ratio', 'tensorpool faults/iter', 'glibc faults/iter'], summary));
console.log(`# ${args.reps} repetitions, each a fresh adaptive pool; tensorpool and glibc alternate first per iteration`);
console.log('\n## recording: one step through a planned pool, record() off and on alternating, touch none (medians)');
console.log(formatTable(['trace', 'ns/op', 'ns/op recording', 'recording costs ns/op'], overhead));
console.log(
  '# tensorpool faults stay 0 even while its blocks are new: the pool pre-faults pages (MADV_POPULATE_WRITE) as it\n' +
    '# carves them, which the kernel does not count as faults; that work shows as ns/op in iteration 1 and as the\n' +
    "# switch's mark ms. Iteration switch+1 also returns the old arena's blocks, whose pages go back to the OS.",
);
writeJson(args.json, { benchmark: 'adaptive', machine, reps: args.reps, iterations, touch, results });

/**
 * Plan training: arena bytes / lower bound for every interval and order, on the shared traces (whole trace
 * and one steady-state iteration) and on generated traces of 100k and 1M events, with parse and training
 * times (medians over --reps runs): S0 literally (fixed 4 KiB interval, then the best interval), then
 * refined (train's `refine`: tensors moved between classes after S0). A second table puts time-shared
 * blocks (issue 13) beside the best size-class plan, on those traces, on the six OCR inference traces in
 * test/fixtures (each, and all six as one plan against the largest one's lower bound), and on any trace
 * given as an argument (several in one argument, comma-separated, train one plan).
 *
 *   npm run build && npx tsx bench/train.ts [--reps 3] [--json out.json] [--traces DIR] [trace[,trace...] ...]
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { readTrace, syntheticTrainingTrace, train, AUTO_INTERVALS, SMALL_AUTO_INTERVALS, type Trace } from '../dist/index.js';
import { formatBytes, formatTable, round } from '../dist/report/table.js';
import { median } from '../dist/report/stats.js';
import { autoIntervals, trainEachInterval, type TrainOrder } from '../dist/plan/train.js';
import { benchArgs, printHeader, writeJson } from './harness.js';

const args = benchArgs(3, { traces: { type: 'string' } });
const machine = printHeader('train: S0 size-class plans, arena / lower bound and training time');
const tracesDir = (args.values.traces as string | undefined) ?? path.resolve(__dirname, '../../shared/traces');

function timed<T>(fn: () => T): { value: T; ms: number } {
  const times: number[] = [];
  let value!: T;
  for (let r = 0; r < args.reps; r++) {
    const start = performance.now();
    value = fn();
    times.push(performance.now() - start);
  }
  return { value, ms: median(times) };
}

interface Input {
  name: string;
  trace: Trace;
  parseMs: number | null;
}
const inputs: Input[] = [];
for (const name of fs.existsSync(tracesDir) ? fs.readdirSync(tracesDir).sort() : []) {
  const file = path.join(tracesDir, name, 'trace.csv.gz');
  if (!fs.existsSync(file)) continue;
  const { value, ms } = timed(() => readTrace(file));
  inputs.push({ name, trace: value, parseMs: ms });
  inputs.push({ name: `${name} iteration 2`, trace: value.iteration(value.iterations), parseMs: null });
}
for (const events of args.quick ? [100_000] : [100_000, 1_000_000]) {
  // Written to disk and read back, so the parse time is that of a real file of this size.
  const file = path.join(os.tmpdir(), `tensorpool-bench-${events}.csv`);
  syntheticTrainingTrace({ events, layers: 64, seed: 11 }).writeCsv(file);
  const { value, ms } = timed(() => readTrace(file));
  fs.rmSync(file);
  inputs.push({ name: `synthetic ${events / 1000}k events`, trace: value, parseMs: ms });
}

const fixtures = path.resolve(__dirname, '../test/fixtures/traces/ocr_det_infer');
// One trace per input shape (ocr-HxW), and one recording of the six in a cycle (ocr-cycle).
const ocr = fs.readdirSync(fixtures).filter((f) => /^ocr-\d+x\d+\.csv\.gz$/.test(f)).sort().map((f) => readTrace(path.join(fixtures, f)));
const ocrCycle = readTrace(path.join(fixtures, 'ocr-cycle.csv.gz'));
const sharedInputs: { name: string; traces: Trace[] }[] = [
  ...inputs.map((input) => ({ name: input.name, traces: [input.trace] })),
  ...ocr.map((trace) => ({ name: `OCR ${path.basename(trace.name, '.csv.gz').slice(4)}`, traces: [trace] })),
  { name: 'OCR, six shapes, one plan', traces: ocr },
  { name: 'OCR, a recorded cycle of the six', traces: [ocrCycle] },
  ...args.positionals.map((arg) => ({ name: arg, traces: arg.split(',').map((file) => readTrace(file)) })),
];

const rows = [];
const results = [];
for (const input of inputs) {
  const lowerBound = input.trace.lowerBound();
  for (const order of ['alloc-time', 'size-desc'] as TrainOrder[]) {
    for (const interval of autoIntervals(input.trace)) {
      const { value, ms } = timed(() => trainEachInterval(input.trace, [interval], order)[0].candidate);
      results.push({ trace: input.name, events: input.trace.eventCount, ...value, trainMs: ms, lowerBound });
      if (interval === 4096) {
        rows.push([input.name, input.trace.eventCount, input.parseMs === null ? null : round(input.parseMs, 0), order, 'S0 4096', 'no', value.classes, value.blocks, round(value.ratio, 3), round(ms, 1)]);
      }
    }
    for (const refine of [false, true]) {
      const { value: plan, ms } = timed(() => train(input.trace, { interval: 'auto', order, refine }));
      const refined = plan.training.refined ? 'yes' : refine ? 'too large' : 'no';
      results.push({ trace: input.name, events: input.trace.eventCount, order, interval: 'auto', refine, refined: plan.training.refined, chosen: plan.interval, ratio: plan.ratio, arenaBytes: plan.arenaBytes, trainMs: ms, lowerBound });
      rows.push([input.name, input.trace.eventCount, null, order, `auto→${plan.interval}`, refined, plan.classes.length, plan.blocks, round(plan.ratio!, 3), round(ms, 1)]);
    }
  }
  const { value: best, ms } = timed(() => train(input.trace, { order: 'auto' }));
  rows.push([input.name, input.trace.eventCount, null, `auto→${best.training.order}`, `auto→${best.interval}`, best.training.refined ? 'yes' : 'no', best.classes.length, best.blocks, round(best.ratio!, 3), round(ms, 1)]);
  console.error(`# ${input.name}: lower bound ${formatBytes(lowerBound)}`);
}

const sharedRows = [];
for (const input of sharedInputs) {
  const lowerBound = Math.max(...input.traces.map((t) => t.lowerBound()));
  const classesOnly = train(input.traces, { order: 'auto', share: false });
  const { value: chosen, ms } = timed(() => train(input.traces, { order: 'auto', share: 'auto' }));
  const sharedRuns = (chosen.training.candidates as { order: string; arenaBytes: number; blocks: number; trainMs: number }[]).filter(
    (c) => c.order === 'time-shared',
  );
  const shared = sharedRuns.reduce((a, c) => (c.arenaBytes < a.arenaBytes ? c : a));
  const events = input.traces.reduce((n, t) => n + t.eventCount, 0);
  results.push({
    trace: input.name,
    events,
    lowerBound,
    classesRatio: classesOnly.arenaBytes / lowerBound,
    timeSharedRatio: shared.arenaBytes / lowerBound,
    timeSharedBlocks: shared.blocks,
    timeSharedMs: Math.max(...sharedRuns.map((c) => c.trainMs)),
    chosen: chosen.layout ? 'time-shared' : 'size classes',
    chosenRatio: chosen.arenaBytes / lowerBound,
    trainMs: ms,
  });
  sharedRows.push([
    input.name,
    events,
    formatBytes(lowerBound),
    round(classesOnly.arenaBytes / lowerBound, 3),
    round(shared.arenaBytes / lowerBound, 3),
    shared.blocks,
    chosen.layout ? 'time-shared' : 'classes',
    round(chosen.arenaBytes / lowerBound, 3),
    round(ms, 1),
  ]);
}

console.log(formatTable(['trace', 'events', 'parse ms', 'order', 'interval', 'refined', 'classes', 'blocks', 'arena / LB', 'train ms'], rows));
console.log(`# 'S0 4096': S0 literally, fixed 4 KiB interval. auto: best of intervals ${AUTO_INTERVALS.join(', ')}, and first ${SMALL_AUTO_INTERVALS.join(', ')} on a trace with requests below 512 B.`);
console.log("# refined: train's refine (native/train/refine.h), default with order auto; 'too large': skipped by its memory limit.");
console.log(`# Times are medians of ${args.reps} runs; auto times cover all its candidates.`);
console.log('');
console.log(formatTable(['trace', 'events', 'lower bound', 'classes / LB', 'time-shared / LB', 'blocks', 'auto keeps', 'arena / LB', 'train ms'], sharedRows));
console.log('# classes: the best size-class plan (order and interval auto, refined). time-shared: the best of its intervals.');
console.log(`# auto keeps: train(trace, { order: 'auto', share: 'auto' }), whose time covers both kinds (median of ${args.reps}).`);
writeJson(args.json, { benchmark: 'train', machine, reps: args.reps, results });

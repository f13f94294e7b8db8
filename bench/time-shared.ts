/**
 * What a time-shared block costs to serve (issue 13's "replay speed unchanged within 5%"): each trace's
 * time-shared plan (`train(trace, { share: true })`) against its size-class plan (`share: false`), both
 * served by the native replay loop, in one process, repetitions interleaved in alternating order; the table
 * shows medians over the second half, the median ratio of the pairs there with its 95% interval, and the
 * page faults of the time-shared plan's repetitions there.
 * `--touch none` (the pool's own work and the loop alone) is the strict comparison; `pages` is the replay's
 * default (one write per 4 KiB of every block), what `tensorpool replay` measures.
 *
 * Blocks of a time-shared plan may share memory, so taking one tests its sharers' live bits and writes its
 * header again (another block's data may have covered it); a size-class block is popped off a list.
 *
 *   npm run build && npx tsx bench/time-shared.ts [--reps 2000] [--touch none,pages] [--json out.json] [--traces DIR] [trace ...]
 */
import path from 'node:path';

import { Pool, faults, readTrace, train, type Trace } from '../dist/index.js';
import { native, type NativeReplayer, type TouchMode } from '../dist/native.js';
import { nativePoolOf } from '../dist/pool/pool.js';
import { formatInterval, formatTable, round } from '../dist/report/table.js';
import { median, medianInterval, pairedRatios } from '../dist/report/stats.js';
import { benchArgs, benchTraces, optionChecks, printHeader, traceLabel, writeJson } from './harness.js';

const args = benchArgs(2000, { traces: { type: 'string' }, touch: { type: 'string' } });
const touches = optionChecks('time-shared', args).names<TouchMode>('touch', ['none', 'pages', 'full'], ['none', 'pages']);
const machine = printHeader('time-shared: serving a time-shared plan against a size-class plan (native loop)');
const ocr = path.resolve(__dirname, '../test/fixtures/traces/ocr_det_infer');
const files = args.positionals.length
  ? args.positionals
  : [...benchTraces(args.values.traces as string | undefined), path.join(ocr, 'ocr-736x1280.csv.gz'), path.join(ocr, 'ocr-cycle.csv.gz')];
const reps = args.quick ? Math.max(10, args.reps >> 4) : args.reps;

interface Served {
  pool: Pool;
  replayer: NativeReplayer;
  nsPerOp: number[];
  faults: number[];
}

function serve(trace: Trace, share: boolean, touch: TouchMode): Served {
  const pool = new Pool({ plan: train(trace, { share }), frontCache: false });
  const replayer = new native.NativeReplayer(nativePoolOf(pool), trace.ops, trace.eventBuffer, trace.sizes, {
    touch,
    iterationMarks: true,
  });
  return { pool, replayer, nsPerOp: [], faults: [] };
}

const rows = [];
const results = [];
for (const file of files) {
  const trace = readTrace(file);
  for (const touch of touches) {
    const shared = serve(trace, true, touch);
    const classes = serve(trace, false, touch);
    for (let rep = 0; rep < reps; rep++) {
      for (const s of rep % 2 ? [shared, classes] : [classes, shared]) {
        const before = faults().minor;
        const start = process.hrtime.bigint();
        s.replayer.run(false);
        s.nsPerOp.push(Number(process.hrtime.bigint() - start) / trace.ops.length);
        s.faults.push(faults().minor - before);
      }
    }
    const half = (values: number[]) => values.slice(values.length >> 1);
    const steady = (values: number[]) => median(half(values));
    const sharedNs = steady(shared.nsPerOp);
    const classesNs = steady(classes.nsPerOp);
    // Repetition by repetition (each pair measured back to back): the machine's drift cancels out.
    const paired = medianInterval(pairedRatios(half(shared.nsPerOp), half(classes.nsPerOp)));
    const sharedFaults = steady(shared.faults);
    const fallbacks = shared.pool.stats().osFallbacks + classes.pool.stats().osFallbacks;
    rows.push([traceLabel(file), trace.ops.length, touch, round(sharedNs, 1), round(classesNs, 1), round(sharedNs / classesNs, 3), formatInterval(paired, 3), sharedFaults, fallbacks]);
    results.push({
      trace: file,
      events: trace.ops.length,
      touch,
      timeSharedNsPerOp: sharedNs,
      sizeClassesNsPerOp: classesNs,
      ratio: sharedNs / classesNs,
      pairedRatio: paired,
      timeSharedFaultsPerRep: sharedFaults,
      osFallbacks: fallbacks,
    });
    shared.pool.close();
    classes.pool.close();
  }
}
console.log(formatTable(['trace', 'events', 'touch', 'time-shared ns/op', 'size classes ns/op', 'ratio', 'paired ratio (95% CI)', 'faults/rep', 'OS fallbacks'], rows));
console.log(`# ${reps} repetitions each, interleaved; medians of the second half; ns/op = a repetition's time / its events;`);
console.log('# paired ratio: the median of each time-shared repetition over the size-classes one beside it, with its 95% interval;');
console.log('# faults/rep: minor page faults of a time-shared repetition (whole process)');
writeJson(args.json, { benchmark: 'time-shared', machine, reps, touches, results });

import type { Plan } from '../plan/plan.js';
import { readTrace } from '../trace/read.js';
import type { Trace } from '../trace/trace.js';
import { AUTO_INTERVALS, SMALL_AUTO_INTERVALS, isTimeShared, SHARE_GAIN, SHARE_LAYOUT_MS, train, type SpansChoice, type TrainCandidate, type TrainOrder } from '../plan/train.js';
import type { PlanServe } from '../plan/plan-spec.js';
import { formatBytes, formatTable, round } from '../report/table.js';
import { CliError, bytesOption, oneOf, parseCommand, usageError, withExamples, writeJsonFile, type Command, type Example } from './common.js';
import { startHeartbeat } from './heartbeat.js';

const usage = `usage: tensorpool train <trace>... [-o plan.json] [--interval auto|BYTES] [--order alloc-time|size-desc|auto]
                        [--refine on|off] [--share auto|on|off] [--serve auto|classes|spans] [--iteration N|all]
                        [--json FILE]

Trains a size-class plan from a trace (S0, and time-shared blocks) and prints the lower bound, the arena
it needs, their ratio, the classes and blocks, the training time, and why no time-shared plan was kept
when none was. Several traces (the same model fed inputs of different shapes, say) give one plan that
serves each of their patterns.

  -o, --output FILE   write the plan JSON (load it with new Pool({ plan: FILE }) or --plan FILE)
  --interval          size-class interval in bytes, a multiple of 64 up to 1G (4096, 64K), or auto: try ${AUTO_INTERVALS.map((i) => (i >= 1024 ? i / 1024 + 'K' : i)).join(', ')}
                      (and first ${SMALL_AUTO_INTERVALS.join(', ')} on a trace with requests below 512 B)
                      and keep the smallest arena (default auto)
  --order             traversal order: alloc-time (S0's default), size-desc, or auto: both (default alloc-time)
  --refine            on: after S0, lower the arena by moving tensors between classes (a class needs only
                      as many blocks as it has tensors living at once); off: S0 literally (default: on
                      with --order auto, else off)
  --share             time-shared blocks: also lay every tensor out at an offset so that blocks whose uses
                      never overlap in time share memory. auto: keep that plan when its arena is at least
                      ${round((1 - SHARE_GAIN) * 100, 1)}% smaller and it serves the last iteration (or cycle of iterations) repeated,
                      laid out again for the repetition where the first layout does not, unless the
                      iterations keep asking for new mixes of sizes (a service's requests); on: keep the smaller
                      plan that serves; off: size classes only (default auto). A layout not done in
                      ${SHARE_LAYOUT_MS / 1000} s (hundreds of thousands of tensors, thousands of them live throughout) is
                      given up: the size-class plan is kept
  --serve             how 'tensorpool run --plan' serves the plan: classes, from its blocks; spans, from the
                      default classes' spans (as with no plan) with the bytes they carved replaying the trace
                      carved at start and kept resident once written; auto: replay the trace through the spans and
                      keep spans when they carve less than the plan's blocks hold (requests overlapping at
                      random, each busy period a new mix of sizes), else classes (default auto). A pool made
                      in-process (new Pool({ plan })) serves the blocks either way
  --iteration         train on iteration N (1-based) or on the whole trace (default all; one trace only)
  --json FILE         write { lowerBound, arenaBytes, ratio, interval, order, classes, blocks, borrows, trainMs, refined,
                      literalArenaBytes, timeShared, sharingPairs, iterationsKeepChanging, serve, spans, ... }`;

const examples: Example[] = [
  { what: 'a plan from a recording of `tensorpool run --record app.csv`, for `tensorpool run --plan app.plan.json`', command: 'tensorpool train app.csv -o app.plan.json' },
  { what: 'one plan for a model fed inputs of several shapes, a recording of each', command: 'tensorpool train small.csv large.csv -o app.plan.json' },
  { what: 'size classes 4 KiB apart, no time-shared blocks, the result also as JSON', command: 'tensorpool train app.csv --interval 4K --share off --json train.json' },
];

/**
 * The intervals --interval takes: multiples of 64 bytes (every block's address and stride are, so a class of
 * another size would be padded to one: native/core/header.h) from 64 B, the smallest 'auto' tries, to 1 GiB.
 */
const INTERVAL_STEP = 64;
const MAX_INTERVAL = 2 ** 30;

function intervalOption(value: string): number {
  let bytes: number | undefined;
  try {
    bytes = bytesOption(value, '--interval');
  } catch {
    bytes = undefined;
  }
  if (bytes === undefined || bytes % INTERVAL_STEP !== 0 || bytes > MAX_INTERVAL) {
    throw new CliError(
      `--interval must be auto or a byte count, a multiple of ${INTERVAL_STEP} from ${INTERVAL_STEP} to 1G such as 4096 or 64K (blocks are ${INTERVAL_STEP}-byte aligned), got ${JSON.stringify(value)}`,
    );
  }
  return bytes;
}

/** --iteration: all, or one of the trace's iterations. */
function iterationOption(value: string | undefined, iterations: number): number | 'all' {
  if (value === undefined || value === 'all') return 'all';
  if (!/^\d+$/.test(value) || Number(value) < 1 || Number(value) > iterations) {
    throw new CliError(`--iteration must be all or an iteration from 1 to ${iterations} (the trace has ${iterations}), got ${JSON.stringify(value)}`);
  }
  return Number(value);
}

export const trainCommand: Command = {
  name: 'train',
  summary: 'train a plan (size classes, time-shared blocks) from one or more traces',
  usage,
  run(argv) {
    const { values, flags, positionals } = parseCommand(
      argv,
      {
        output: { type: 'string', short: 'o' },
        interval: { type: 'string' },
        order: { type: 'string' },
        refine: { type: 'string' },
        iteration: { type: 'string' },
        share: { type: 'string' },
        serve: { type: 'string' },
        json: { type: 'string' },
      },
      usage,
      ['output', 'json'],
    );
    if (flags.help) return void console.log(withExamples(usage, examples));
    if (positionals.length === 0) throw usageError('expected one or more trace files, got none', usage);
    const interval = values.interval === undefined || values.interval === 'auto' ? 'auto' : intervalOption(values.interval);
    const order = oneOf<TrainOrder | 'auto'>(values.order, '--order', ['alloc-time', 'size-desc', 'auto'], 'alloc-time');
    const share = { auto: 'auto', on: true, off: false }[oneOf(values.share, '--share', ['auto', 'on', 'off'], 'auto')] as boolean | 'auto';
    const serve = oneOf<PlanServe | 'auto'>(values.serve, '--serve', ['auto', 'classes', 'spans'], 'auto');
    const refine = values.refine === undefined ? undefined : oneOf(values.refine, '--refine', ['on', 'off'], 'off') === 'on';
    if (values.iteration !== undefined && values.iteration !== 'all' && positionals.length > 1) {
      throw new CliError('--iteration applies to one trace: with several, each is trained on whole');
    }
    // Reading a large recording and training on it can take minutes, during which nothing else prints.
    const heartbeat = startHeartbeat({ label: 'tensorpool train' });
    let traces: Trace[];
    let iteration: number | 'all';
    let plan: Plan;
    try {
      traces = positionals.map((path, i) => {
        heartbeat.stage(`reading ${path}${positionals.length > 1 ? ` (${i + 1} of ${positionals.length})` : ''}`);
        return readTrace(path);
      });
      iteration = iterationOption(values.iteration, traces[0].iterations);
      const tensors = traces.reduce((sum, trace) => sum + trace.bufferCount, 0);
      heartbeat.stage(`training on ${tensors} tensors`);
      plan = train(traces.length === 1 ? traces[0] : traces, { interval, order, iteration, refine, share, serve });
    } finally {
      heartbeat.stop();
    }
    const t = plan.training;
    const candidates = (t.candidates as TrainCandidate[] | undefined) ?? [];
    const timeShared = plan.layout !== undefined;

    for (const trace of traces) {
      console.log(`trace        ${trace.name} (${trace.format}, ${trace.eventCount} events, ${trace.bufferCount} buffers, ${trace.iterations} iteration(s), lower bound ${formatBytes(trace.lowerBound())})`);
    }
    const what = traces.length > 1 ? `${traces.length} traces, one after another` : iteration === 'all' ? 'the whole trace' : `iteration ${iteration}`;
    console.log(`trained on   ${what}, ${timeShared ? 'time-shared blocks' : `order ${t.order}`}, interval ${plan.interval}${interval === 'auto' ? ' (auto)' : ''}`);
    console.log(`lower bound  ${formatBytes(plan.lowerBound!)} (${plan.lowerBound} B${traces.length > 1 ? ', the largest trace\'s' : ''})`);
    console.log(`arena        ${formatBytes(plan.arenaBytes)} (${plan.arenaBytes} B, ${round(plan.ratio!, 3)}x the lower bound)`);
    if (timeShared) {
      const s0 = candidates.filter((c) => !isTimeShared(c)).reduce<TrainCandidate | undefined>((a, c) => (a && a.arenaBytes <= c.arenaBytes ? a : c), undefined);
      console.log(`layout       ${plan.blocks} blocks at offsets of their own; ${plan.sharingPairs} pairs of blocks share memory` +
        (s0 ? ` (size classes alone: ${formatBytes(s0.arenaBytes)}, ${round(s0.ratio, 3)}x)` : ''));
    } else if (t.refined) {
      const literal = t.literalArenaBytes as number;
      console.log(`refined      from S0's ${formatBytes(literal)} (${round(literal / plan.lowerBound!, 3)}x the lower bound)`);
    }
    if (t.notTimeShared) console.log(`time-shared  not kept: ${t.notTimeShared as string}`);
    const spans = t.spans as SpansChoice | undefined;
    if (plan.serve === 'spans') {
      console.log(`serve        spans: 'tensorpool run --plan' serves from the default classes' spans, ${formatBytes(plan.spans!.reserve)} kept once written`);
      if (spans) console.log(`             (replaying the trace, the spans carved ${formatBytes(spans.carvedBytes)}; the plan's blocks hold ${formatBytes(spans.classArenaBytes)})`);
    } else if (spans) {
      console.log(`serve        classes: the plan's blocks (replaying the trace, the default classes' spans carved ${formatBytes(spans.carvedBytes)})`);
    }
    if (t.iterationsKeepChanging && plan.serve === 'classes') {
      console.log('note         the iterations keep asking for new mixes of sizes (requests overlapping at random?): a plan');
      console.log('             holds its arena from the start, sized for the mixes recorded; the default classes (no --plan)');
      console.log('             follow what is live and may hold less: compare the two with `tensorpool run --stats`');
    }
    console.log(`classes      ${plan.classes.length} classes, ${plan.blocks} blocks; ${t.borrows} of ${t.tensors} tensors borrow a larger class`);
    console.log(`time         ${round(t.trainMs as number, 1)} ms`);
    console.log('');
    console.log(formatTable(['class size', 'blocks', 'bytes'], plan.classes.map((c) => [c.size, c.blocks, formatBytes(c.size * c.blocks)])));
    if (candidates.length > 1) {
      console.log('');
      console.log(formatTable(
        ['interval', 'order', 'classes', 'blocks', 'arena', 'x lower bound', 'S0 alone', 'borrows', 'ms'],
        candidates.map((c) => [
          c.interval,
          c.order,
          c.classes,
          c.blocks,
          formatBytes(c.arenaBytes),
          round(c.ratio, 3),
          c.refined ? round(c.literalArenaBytes / plan.lowerBound!, 3) : '–',
          c.borrows,
          round(c.trainMs, 1),
        ]),
      ));
    }
    if (values.output) {
      plan.write(values.output);
      console.log(`\nwrote ${values.output}`);
    }
    writeJsonFile(values.json, {
      traces: positionals,
      lowerBound: plan.lowerBound,
      arenaBytes: plan.arenaBytes,
      ratio: plan.ratio,
      interval: plan.interval,
      order: t.order,
      iteration,
      classes: plan.classes,
      blocks: plan.blocks,
      borrows: t.borrows,
      tensors: t.tensors,
      trainMs: t.trainMs,
      refined: t.refined ?? false,
      literalArenaBytes: t.literalArenaBytes ?? plan.arenaBytes,
      timeShared,
      notTimeShared: t.notTimeShared ?? null,
      iterationsKeepChanging: t.iterationsKeepChanging ?? false,
      sharingPairs: plan.sharingPairs,
      serve: plan.serve,
      spans: spans ?? null,
      candidates,
    });
  },
};

import fs from 'node:fs';
import path from 'node:path';

import { packageRoot } from '../native.js';
import { replay, TOUCH_MODES, type ReplayReport, type TouchMode } from '../replay/replay.js';
import type { MedianInterval } from '../report/stats.js';
import { ALLOCATOR_NAMES, type AllocatorName } from '../replay/allocators.js';
import { replayReportHtml } from '../report/html.js';
import { describeMachine } from '../report/machine.js';
import { formatBytes, formatTable, round } from '../report/table.js';
import { replayVerdict } from '../report/verdict.js';
import { writeFileAtomic } from '../io/files.js';
import { readTrace } from '../trace/read.js';
import type { Trace } from '../trace/trace.js';
import { CliError, integerOption, oneOf, onePositional, parseCommand, usageError, withExamples, writeJsonFile, type Command, type Example } from './common.js';
import { progressBar } from './progress.js';

const DEFAULT_REPS = 20;
const replayOptions = {
  allocators: { type: 'string' },
  reps: { type: 'string' },
  touch: { type: 'string' },
  plan: { type: 'string' },
  'offset-plan': { type: 'string' },
  json: { type: 'string' },
  report: { type: 'string' },
} as const;

const optionHelp = `  --allocators LIST   comma-separated, from ${ALLOCATOR_NAMES.join(', ')} (default: all but
                      tensorpool-classes, the size classes to set beside a time-shared --plan, and
                      tensorpool-js, tensorpool's pool driven from JavaScript (alloc() and release() per
                      event) instead of the native loop; a peer that is not installed is reported with the
                      Debian package that provides it). ideal is the
                      yardstick, not an allocator: the offset plan's addresses in a pre-faulted arena, no
                      bookkeeping, so its ns/op is the cost of touching the memory alone
  --reps N            repetitions per allocator, each from empty (default ${DEFAULT_REPS}); the steady state is the
                      last half
  --touch MODE        pages: one write per 4 KiB of every block (default), full: memset, none, or verify:
                      a stamp of the buffer's own at every page and at its end, checked before its free
                      (a block handed out twice or written while live counts as corrupt; exit 1)
  --plan FILE         tensorpool's plan (default: trained from the trace itself, order and interval auto,
                      time-shared blocks where they save memory); tensorpool-classes always trains its own
                      size-class plan (time-shared blocks off), for comparison
  --offset-plan FILE  tensorpool-offsets' and ideal's plan (default: planned from the trace itself, strategy
                      best, 10 s)
  --json FILE         write { trace, reps, touch, results: [{ allocator, nsPerOp, steadyMinorFaultsPerRep,
                      peakRssBytes, rssGrowthBytes, lowerBoundBytes, ... }] }
  --report FILE.html  write a self-contained HTML report (bars per allocator, memory timeline)`;

function parseAllocators(value: string | undefined): AllocatorName[] | undefined {
  if (value === undefined) return undefined;
  const names = value.split(',').map((s) => s.trim()).filter(Boolean);
  if (names.length === 0) throw new CliError('--allocators needs at least one allocator');
  for (const name of names) {
    if (!ALLOCATOR_NAMES.includes(name as AllocatorName)) {
      throw new CliError(`unknown allocator '${name}' (known: ${ALLOCATOR_NAMES.join(', ')})`);
    }
  }
  return names as AllocatorName[];
}

/** The report: what was replayed and how, the table, how each of tensorpool's rows was served, the legend, the verdict. */
function printReport(report: ReplayReport, trace: Trace): void {
  console.log(`trace        ${report.trace}: ${report.events} events, ${report.buffers} buffers, lower bound ${formatBytes(report.lowerBoundBytes)}`);
  if (report.plan) {
    console.log(`plan         ${formatBytes(report.plan.arenaBytes)} arena (${round(report.plan.arenaBytes / report.lowerBoundBytes, 3)}x the lower bound), interval ${report.plan.interval}, order ${report.plan.order}, trained on ${report.plan.source}`);
    for (const warning of report.plan.warnings) console.log(`             warning: ${warning}`);
  }
  if (report.offsetPlan) {
    const o = report.offsetPlan;
    console.log(`offset plan  ${formatBytes(o.height)} arena (${round(o.height / report.lowerBoundBytes, 4)}x the lower bound), strategy ${o.strategy}${o.optimal ? ' (optimal)' : ''}, planned on ${o.source}`);
  }
  const steady = report.reps - Math.floor(report.reps / 2);
  console.log(`measured     ${report.reps} repetitions per allocator, interleaved, touch ${report.touch}; the steady state is the last ${steady}: times are their medians, faults their mean`);
  console.log(`machine      ${describeMachine(report.machine)}`);
  console.log('');
  const verify = report.touch === 'verify';
  const rows = report.results.map((r) =>
    r.available
      ? [
          r.allocator,
          ...(verify ? [r.corruptions] : []),
          withSpread(r.nsPerOp, r.spread.nsPerOp, 0),
          r.allocNs === null ? null : withSpread(r.allocNs, r.spread.allocNs, 0),
          r.releaseNs === null ? null : withSpread(r.releaseNs, r.spread.releaseNs, 0),
          r.vsBestPeer === null ? null : withSpread(r.vsBestPeer, r.vsBestPeerInterval, 3),
          faultsCell(r.steadyMinorFaultsPerRep, r.spread.minorFaults),
          formatBytes(r.peakRssBytes),
          formatBytes(r.rssGrowthBytes),
          round(r.rssVsLowerBound, 3),
        ]
      : [r.allocator, ...(verify ? [null] : []), null, null, null, null, null, null, null, null],
  );
  console.log(formatTable(
    ['allocator', ...(verify ? ['corrupt'] : []), 'ns/op', 'alloc ns', 'release ns', 'x best peer', 'faults/rep', 'peak RSS', 'RSS growth', 'x LB'],
    rows,
    ['', ...(verify ? ['total'] : []), 'median', 'median', 'median', 'median', 'mean', 'one run', 'one run', 'one run'],
  ));
  for (const r of report.results) if (!r.available) console.log(`  ${r.error}`);
  for (const r of report.results) {
    const p = r.pool;
    if (!p) continue;
    // Means over the repetitions: the preload route's counters include the worker's own allocations.
    const n = (count: number) => round(count, 1);
    const classes = `${n(p.hits)} from their own size class, ${n(p.borrows)} from a larger one, ${n(p.osFallbacks + p.osOversize)} from the OS`;
    let served: string;
    if (r.allocator === 'tensorpool-offsets') {
      served = `${n(p.offsetHits)} at planned offsets, ${n(p.offsetMisses)} not (then ${n(p.hits)} from classes, ${n(p.osFallbacks + p.osOversize)} from the OS)`;
    } else if (r.allocator === 'tensorpool-preload') {
      // The worker's whole malloc: the trace's requests at or above the threshold, and the worker's own.
      const threshold = p.minBytes ?? 0;
      const routed = trace.sizes.filter((size) => size >= threshold).length;
      served =
        `${n(p.hits + p.borrows + p.osFallbacks + p.osOversize)} requests reached the process pool, the trace's ${routed} of at least ${formatBytes(threshold)} ` +
        `(the threshold) and the worker's own: ${classes}; the trace's ${trace.bufferCount - routed} smaller requests went to glibc's malloc`;
    } else {
      served = `${classes}; schedule ${n(p.scheduleHits)} hits, ${n(p.scheduleMisses)} misses` + (p.busySkips ? `; ${n(p.busySkips)} blocks skipped (memory in use)` : '');
    }
    console.log(`  ${r.allocator} per repetition: ${served}`);
  }
  console.log('');
  console.log(legend(report));
  const verdict = replayVerdict(report);
  if (verdict.length) {
    console.log('');
    verdict.forEach((line, i) => console.log(`${i ? '             ' : 'verdict      '}${line}`));
  }
}

/**
 * A median and the spread of its 95% interval, as the larger distance from it in percent: "11533 ±4%"; beyond
 * 100% only "±>100%" (a stall on a busy machine can put one bound hundreds of times away; --json has both).
 */
function withSpread(value: number, interval: MedianInterval | null, digits: number): string {
  const shown = String(round(value, digits));
  // One repetition has no spread to show (confidence 0).
  if (!interval || !(interval.confidence > 0) || !(interval.median > 0)) return shown;
  const spread = Math.max(interval.high - interval.median, interval.median - interval.low) / interval.median;
  return `${shown} ±${spread > 1 ? '>100' : spread >= 0.1 ? Math.round(100 * spread) : round(100 * spread, 1)}%`;
}

/** The mean faults per repetition, and the range of the repetitions when they differ: "1.5 (0-3)". */
function faultsCell(mean: number, range: { min: number; max: number }): string {
  const shown = String(round(mean, 1));
  return range.min === range.max || !Number.isFinite(range.min) ? shown : `${shown} (${range.min}-${range.max})`;
}

/** What each column and row means, printed under the table. */
function legend(report: ReplayReport): string {
  const steady = `the steady repetitions (the last ${report.reps - Math.floor(report.reps / 2)} of ${report.reps})`;
  const faultSource = report.results.find((r) => r.available)?.faultSource ?? 'perf_event';
  const names = new Set(report.results.filter((r) => r.available).map((r) => r.allocator));
  const rows: [string, string][] = [
    ['ns/op', `a repetition's wall time (touching the memory included) / its allocs + releases; median of ${steady}`],
    ['±', `the median's confidence interval (distribution-free: 95%, or with few repetitions their whole range, ${confidenceOf(report)}), as its larger distance from the median (--json: its bounds); wide: a noisy machine`],
    ['alloc/release ns', 'time inside the calls alone, from the repetitions that time every call (every other one)'],
    [
      'x best peer',
      report.bestPeer
        ? `ns/op / the best peer's ns/op, the best peer being the one of the peers measured (malloc, jemalloc, mimalloc, tcmalloc) with the lowest median ns/op in this run: ${report.bestPeer}; ± from the ratios repetition by repetition (they run interleaved); below 1 is faster`
        : 'ns/op / the best peer\'s: no peer (malloc, jemalloc, mimalloc, tcmalloc) ran',
    ],
    ['faults/rep', `minor page faults per repetition (${faultSource}), mean of ${steady} (a fault costs whenever it comes), with their range`],
    ['peak RSS', "the allocator's worker process at its peak (one figure per run: no spread)"],
    ['RSS growth', 'peak RSS - the RSS before the first repetition: the memory the allocator took for the trace'],
    ['x LB', "RSS growth / the trace's lower bound (the most bytes live at once); 1 is no overhead"],
  ];
  const what: Partial<Record<AllocatorName, string>> = {
    tensorpool: 'the pool in process, its plan (above) trained on this trace',
    'tensorpool-classes': 'the same trace\'s size classes only (time-shared blocks off)',
    'tensorpool-js': "tensorpool's pool driven from JavaScript (alloc() and release() per event)",
    'tensorpool-offsets': 'the pool in offsets mode: each allocation at the offset plan\'s address (above), classes behind it',
    'tensorpool-preload': "tensorpool run's route: the worker's malloc replaced by the preload library (the process pool, default classes)",
    malloc: "glibc's malloc",
    ideal: "the yardstick, not an allocator: the offset plan's addresses, pre-faulted, no bookkeeping (its alloc/release ns are the timer's own cost)",
  };
  for (const name of ['jemalloc', 'mimalloc', 'tcmalloc'] as const) what[name] = `${name} through LD_PRELOAD`;
  for (const name of ALLOCATOR_NAMES) if (names.has(name) && what[name]) rows.push([name, what[name]!]);
  const width = Math.max(...rows.map(([key]) => key.length));
  return rows.map(([key, text]) => wrap(text, LEGEND_COLUMNS - width - 4).map((line, i) => `  ${(i ? '' : key).padEnd(width)}  ${line}`.trimEnd()).join('\n')).join('\n');
}

const LEGEND_COLUMNS = 110;

/** The lowest confidence among the intervals the table shows, in words: "at least 94%". */
function confidenceOf(report: ReplayReport): string {
  const intervals = report.results.filter((r) => r.available).flatMap((r) => [r.spread.nsPerOp, r.spread.allocNs, r.spread.releaseNs, r.vsBestPeerInterval]);
  const lowest = Math.min(...intervals.filter((i): i is MedianInterval => i !== null && i.confidence > 0).map((i) => i.confidence));
  return Number.isFinite(lowest) ? `here at least ${Math.floor(100 * lowest)}%` : 'none here: too few repetitions';
}

/** Words into lines of at most `columns` characters (a longer word stands alone). */
function wrap(text: string, columns: number): string[] {
  const lines: string[] = [];
  let line = '';
  for (const word of text.split(' ')) {
    if (line && line.length + 1 + word.length > columns) {
      lines.push(line);
      line = word;
    } else line = line ? `${line} ${word}` : word;
  }
  return [...lines, line];
}

async function runReplay(tracePath: string, values: Record<string, string | undefined>): Promise<void> {
  const reps = integerOption(values.reps, '--reps', DEFAULT_REPS, 1);
  const touch = oneOf<TouchMode>(values.touch, '--touch', TOUCH_MODES, 'pages');
  const allocators = parseAllocators(values.allocators);
  const trace = readTrace(tracePath);
  const report = await replay(trace, {
    reps,
    touch,
    allocators,
    plan: values.plan,
    offsetPlan: values['offset-plan'],
    onProgress: progressBar('replay'),
  });
  printReport(report, trace);
  writeJsonFile(values.json, report);
  if (values.report) {
    writeFileAtomic(values.report, replayReportHtml(report, trace));
    console.log(`\nwrote ${values.report}`);
  }
  // The table says what each failure was; the exit code says that nothing was measured.
  if (!report.results.some((r) => r.available)) throw new CliError('every allocator failed: nothing was measured', 1);
  const corrupting = report.results.filter((r) => r.corruptions > 0).map((r) => `${r.allocator} (${r.corruptions})`);
  if (corrupting.length) throw new CliError(`buffers found corrupt at their free: ${corrupting.join(', ')}`, 1);
}

const replayUsage = `usage: tensorpool replay <trace> [--allocators a,b,...] [--reps N] [--touch pages|full|none|verify]
                         [--plan FILE] [--json FILE] [--report FILE.html]

Replays a trace (its allocations and frees, in order; each repetition from empty) against tensorpool and
real allocators, each in a process of its own, interleaved, and prints ns per operation, page faults per
repetition, peak RSS and its growth, against the trace's lower bound; then a verdict: tensorpool's faults and
memory beside the peers', and its time against the fastest peer's, ranked only where the repetitions say so
(else: too noisy to rank). Exits 1 when no allocator measured anything, or when --touch verify found a
buffer corrupt.

${optionHelp}`;

const replayExamples: Example[] = [
  { what: 'a recording of `tensorpool run --record app.csv` against every allocator here', command: 'tensorpool replay app.csv' },
  { what: 'three allocators, more repetitions (a noisy machine), and an HTML report', command: 'tensorpool replay app.csv --allocators tensorpool,malloc,jemalloc --reps 40 --report replay.html' },
  { what: 'a plan of yours, and a check that no allocator hands out a block twice', command: 'tensorpool replay app.csv --plan app.plan.json --touch verify' },
];

export const replayCommand: Command = {
  name: 'replay',
  summary: 'replay a trace against tensorpool and glibc / jemalloc / mimalloc / tcmalloc',
  usage: replayUsage,
  async run(argv) {
    const { values, flags, positionals } = parseCommand(argv, replayOptions, replayUsage, ['json', 'report']);
    if (flags.help) return void console.log(withExamples(replayUsage, replayExamples));
    await runReplay(onePositional(positionals, 'trace file', replayUsage), values);
  },
};

/** The traces shipped in the package (traces/*.csv.gz), by name. */
export function bundledTrace(name: string): string | undefined {
  const file = path.join(packageRoot, 'traces', `${name}.csv.gz`);
  return fs.existsSync(file) ? file : undefined;
}

export const DEFAULT_TRACE = 'resnet18_train';

const benchUsage = `usage: tensorpool bench [--trace NAME|FILE] [--allocators a,b,...] [--reps N]
                        [--touch pages|full|none|verify] [--plan FILE] [--json FILE] [--report FILE.html]

The main job: replays the bundled default trace (${DEFAULT_TRACE}, a real resnet18 training step) against
tensorpool and every allocator available here. Same measurements as 'tensorpool replay'.

  --trace NAME|FILE   a bundled trace (${DEFAULT_TRACE}, transformer_train) or any trace file
${optionHelp}`;

const benchExamples: Example[] = [
  { what: 'the bundled resnet18 training step against every allocator here (npm start)', command: 'tensorpool bench' },
  { what: 'the bundled transformer trace, 40 repetitions (a noisy machine)', command: 'tensorpool bench --trace transformer_train --reps 40' },
  { what: 'tensorpool against glibc alone, the report also as JSON', command: 'tensorpool bench --allocators tensorpool,malloc --json bench.json' },
];

export const benchCommand: Command = {
  name: 'bench',
  summary: `replay the bundled ${DEFAULT_TRACE} trace against every allocator available (npm start)`,
  usage: benchUsage,
  async run(argv) {
    const { values, flags, positionals } = parseCommand(argv, { ...replayOptions, trace: { type: 'string' } }, benchUsage, ['json', 'report']);
    if (flags.help) return void console.log(withExamples(benchUsage, benchExamples));
    if (positionals.length) throw usageError(`unexpected argument '${positionals[0]}'`, benchUsage);
    const name = values.trace ?? DEFAULT_TRACE;
    const tracePath = bundledTrace(name) ?? name;
    await runReplay(tracePath, values);
  },
};

import fs from 'node:fs';
import path from 'node:path';

import { packageRoot } from '../native.js';
import { replay, TOUCH_MODES, type ReplayReport, type TouchMode } from '../replay/replay.js';
import { ALLOCATOR_NAMES, type AllocatorName } from '../replay/allocators.js';
import { replayReportHtml } from '../report/html.js';
import { describeMachine } from '../report/machine.js';
import { formatBytes, formatTable, round } from '../report/table.js';
import { writeFileAtomic } from '../files.js';
import { readTrace } from '../trace/read.js';
import { CliError, integerOption, oneOf, onePositional, parseCommand, writeJsonFile, type Command } from './common.js';
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

function printReport(report: ReplayReport): void {
  console.log(`trace        ${report.trace}: ${report.events} events, ${report.buffers} buffers, lower bound ${formatBytes(report.lowerBoundBytes)}`);
  if (report.plan) {
    console.log(`plan         ${formatBytes(report.plan.arenaBytes)} arena (${round(report.plan.arenaBytes / report.lowerBoundBytes, 3)}x the lower bound), interval ${report.plan.interval}, order ${report.plan.order}, trained on ${report.plan.source}`);
    for (const warning of report.plan.warnings) console.log(`             warning: ${warning}`);
  }
  if (report.offsetPlan) {
    const o = report.offsetPlan;
    console.log(`offset plan  ${formatBytes(o.height)} arena (${round(o.height / report.lowerBoundBytes, 4)}x the lower bound), strategy ${o.strategy}${o.optimal ? ' (optimal)' : ''}, planned on ${o.source}`);
  }
  console.log(`measured     ${report.reps} repetitions per allocator, interleaved, touch ${report.touch}; medians of the steady state (last half)`);
  console.log(`machine      ${describeMachine(report.machine)}`);
  console.log('');
  const verify = report.touch === 'verify';
  const rows = report.results.map((r) =>
    r.available
      ? [
          r.allocator,
          ...(verify ? [r.corruptions] : []),
          round(r.nsPerOp, 0),
          r.allocNs === null ? null : round(r.allocNs, 0),
          r.releaseNs === null ? null : round(r.releaseNs, 0),
          r.vsBestPeer === null ? null : round(r.vsBestPeer, 3),
          round(r.steadyMinorFaultsPerRep, 1),
          formatBytes(r.peakRssBytes),
          formatBytes(r.rssGrowthBytes),
          round(r.rssVsLowerBound, 3),
        ]
      : [r.allocator, ...(verify ? [null] : []), null, null, null, null, null, null, null, null],
  );
  console.log(formatTable(['allocator', ...(verify ? ['corrupt'] : []), 'ns/op', 'alloc ns', 'release ns', 'x best peer', 'faults/rep', 'peak RSS', 'RSS growth', 'x LB'], rows));
  for (const r of report.results) if (!r.available) console.log(`  ${r.error}`);
  for (const r of report.results) {
    const p = r.pool;
    if (!p) continue;
    // Means over the repetitions: the preload route's counters include the worker's own allocations.
    const n = (count: number) => round(count, 1);
    const served =
      r.allocator === 'tensorpool-offsets'
        ? `${n(p.offsetHits)} at planned offsets, ${n(p.offsetMisses)} not (then ${n(p.hits)} from classes, ${n(p.osFallbacks + p.osOversize)} from the OS)`
        : `${n(p.hits)} own-class hits, ${n(p.borrows)} borrows, ${n(p.osFallbacks + p.osOversize)} OS fallbacks; schedule ${n(p.scheduleHits)} hits, ${n(p.scheduleMisses)} misses` +
          (p.busySkips ? `; ${n(p.busySkips)} blocks skipped (memory in use)` : '');
    console.log(`  ${r.allocator} per repetition: ${served}`);
  }
  const faultSource = report.results.find((r) => r.available)?.faultSource ?? 'perf_event';
  console.log(`  ns/op: the repetition's time (touching included) / allocs and releases; alloc/release ns: inside the calls; faults: ${faultSource}`);
  if (report.results.some((r) => r.allocator === 'ideal' && r.available)) {
    console.log("  ideal: the offset plan's addresses, pre-faulted, no bookkeeping: the floor (its alloc/release ns are the timer's own cost)");
  }
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
  printReport(report);
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
repetition, peak RSS and its growth, against the trace's lower bound. Exits 1 when no allocator measured
anything, or when --touch verify found a buffer corrupt.

${optionHelp}`;

export const replayCommand: Command = {
  name: 'replay',
  summary: 'replay a trace against tensorpool and glibc / jemalloc / mimalloc / tcmalloc',
  usage: replayUsage,
  async run(argv) {
    const { values, flags, positionals } = parseCommand(argv, replayOptions, replayUsage, ['json', 'report']);
    if (flags.help) return void console.log(replayUsage);
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

export const benchCommand: Command = {
  name: 'bench',
  summary: `replay the bundled ${DEFAULT_TRACE} trace against every allocator available (npm start)`,
  usage: benchUsage,
  async run(argv) {
    const { values, flags, positionals } = parseCommand(argv, { ...replayOptions, trace: { type: 'string' } }, benchUsage, ['json', 'report']);
    if (flags.help) return void console.log(benchUsage);
    if (positionals.length) throw new CliError(`unexpected argument '${positionals[0]}'\n\n${benchUsage}`);
    const name = values.trace ?? DEFAULT_TRACE;
    const tracePath = bundledTrace(name) ?? name;
    await runReplay(tracePath, values);
  },
};

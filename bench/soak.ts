/**
 * Soak (issue 14): bench/native/soak.cc drives one pool from 4 native threads for 10^8 operations (alloc or
 * release), sizes drawn from real traces, a quarter of the releases stream-ordered on two streams, and a
 * re-plan (record, train, prepare, install at a mark, discard the retired arena's free pages) every 10^7;
 * every block stamped at allocation and checked at release. Prints operations per second, corruptions and
 * the RSS after warm-up against the RSS at the end.
 *
 * RSS growth compares the median of the last 10 one-second samples with the median of the 10 samples that
 * follow the warm-up (the first quarter of the run, which holds the first re-plans); as every re-plan sizes a
 * new arena from its own window, RSS steps with the plan, and the trend (least squares) is printed too.
 *
 *   npm run build && npx tsx bench/soak.ts [--ops 1e8] [--threads 4] [--replan 1e7] [--json out.json] [trace ...]
 * Traces default to the repository's fixtures (resnet18 training, five torch inference passes, six OCR shapes).
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { readTrace } from '../dist/index.js';
import { formatTable, round } from '../dist/report/table.js';
import { benchArgs, printHeader, writeJson } from './harness.js';

const args = benchArgs(1, { ops: { type: 'string' }, threads: { type: 'string' }, replan: { type: 'string' } });
const ops = Number(args.values.ops ?? 1e8);
const threads = Number(args.values.threads ?? 4);
const replan = Number(args.values.replan ?? 1e7);
for (const [flag, value] of [['--ops', ops], ['--threads', threads], ['--replan', replan]] as const) {
  if (!Number.isFinite(value) || value < 1) {
    console.error(`${flag} must be a positive number, got ${String(args.values[flag.slice(2)])}`);
    process.exit(2);
  }
}
const machine = printHeader(`soak: ${ops.toExponential(0)} operations from ${threads} threads on one pool`);

const root = path.resolve(__dirname, '..');
const program = path.join(root, 'build-native/tp_soak');
if (!fs.existsSync(program)) {
  execFileSync('cmake', ['-S', root, '-B', path.join(root, 'build-native'), '-DCMAKE_BUILD_TYPE=RelWithDebInfo'], { stdio: 'ignore' });
  execFileSync('cmake', ['--build', path.join(root, 'build-native'), '--target', 'tp_soak'], { stdio: 'ignore' });
}

const fixtures = path.join(root, 'test/fixtures/traces');
const traces = args.positionals.length
  ? args.positionals
  : ['resnet18_train/trace.json.gz', ...fs.readdirSync(path.join(fixtures, 'torch_infer')).map((f) => `torch_infer/${f}`),
     ...fs.readdirSync(path.join(fixtures, 'ocr_det_infer')).map((f) => `ocr_det_infer/${f}`)].map((f) => path.join(fixtures, f));
const sizes: number[] = [];
for (const file of traces) for (const size of readTrace(file).sizes) sizes.push(size);
const sizesFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'tp-soak-')), 'sizes.txt');
fs.writeFileSync(sizesFile, sizes.join('\n') + '\n');
console.log(`# ${sizes.length} sizes from ${traces.length} traces (${round(Math.max(...sizes) / 2 ** 20, 1)} MiB largest)`);

interface SoakResult {
  operations: number;
  seconds: number;
  corruptions: number;
  failures: number;
  replans: number;
  replanFailures: number;
  allocs: number;
  osFallbacks: number;
  liveBlocksAtEnd: number;
  deferredAtEnd: number;
  switches: number;
  peakLiveMiB: number;
  rssMiB: number[];
  poolMiB: number[];
}
let result: SoakResult;
try {
  result = JSON.parse(execFileSync(program, [sizesFile, String(ops), String(threads), String(replan)], { encoding: 'utf8' }));
} catch (error) {
  const out = (error as { stdout?: string }).stdout;
  if (!out) throw error;
  result = JSON.parse(out);  // exit 1: corruptions or failures, reported below
} finally {
  fs.rmSync(path.dirname(sizesFile), { recursive: true, force: true });
}

const median = (v: number[]) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)] ?? NaN;
const rss = result.rssMiB;
const warm = Math.floor(rss.length / 4);
const after = median(rss.slice(warm, warm + 10)), end = median(rss.slice(-10));
// Each re-plan sizes the arena anew from its own window, so RSS steps with the serving plan; the trend
// (least squares over the samples after warm-up) separates growth from those steps.
const tail = rss.slice(warm);
const meanX = (tail.length - 1) / 2, meanY = tail.reduce((a, b) => a + b, 0) / tail.length;
const slope = tail.reduce((a, y, x) => a + (x - meanX) * (y - meanY), 0) / tail.reduce((a, _, x) => a + (x - meanX) ** 2, 0);
// Too few samples (a short run) give no trend worth printing.
const trendGrowth = tail.length >= 20 ? (slope * (tail.length - 1)) / after : NaN;
console.log(
  formatTable(
    ['operations', 'seconds', 'ops/s', 'corruptions', 'failures', 're-plans', 'OS fallbacks', 'peak live MiB', 'RSS max in warm-up MiB'],
    [[result.operations, round(result.seconds, 1), Math.round(result.operations / result.seconds), result.corruptions, result.failures,
      `${result.replans} (${result.replanFailures} failed)`, result.osFallbacks, round(result.peakLiveMiB, 1), round(Math.max(...rss.slice(0, warm + 1)), 0)]],
  ),
);
console.log(
  formatTable(
    ['RSS after warm-up MiB', 'RSS at end MiB', 'growth (medians)', 'trend over the run after warm-up', 'min-max after warm-up MiB'],
    [[round(after, 1), round(end, 1), `${round((end / after - 1) * 100, 2)}%`, Number.isNaN(trendGrowth) ? 'n/a (under 20 samples)' : `${round(trendGrowth * 100, 2)}%`, `${round(Math.min(...tail), 0)}-${round(Math.max(...tail), 0)}`]],
  ),
);
console.log(`# blocks live at the end ${result.liveBlocksAtEnd}, deferred ${result.deferredAtEnd}; ${rss.length} RSS samples; warm-up: the first ${warm}`);
writeJson(args.json, { benchmark: 'soak', machine, threads, ops, replan, traces, result, rss: { after, end, trendGrowth } });
process.exitCode = result.corruptions === 0 && result.failures === 0 ? 0 : 1;

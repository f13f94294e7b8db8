/**
 * Soak (issue 14): 10^8 operations (alloc or release) against one pool from native threads and
 * worker_threads at once, sizes from real traces, stream-ordered releases, a re-plan every 10^7 operations,
 * every block stamped and checked; prints operations per second, corruptions and the RSS after warm-up
 * against the RSS at the end.
 *
 * The default driver runs in this Node.js process, against the package's own pool:
 * - native threads: replays of the real traces on libuv threads (`NativeReplayer.runAsync`, one trace per
 *   thread, cycling), their blocks stamped at every page and checked at release (touch 'verify');
 * - worker_threads (bench/soak-worker.cjs): `Pool.attach()` to the same pool, 16 live blocks each replaced at
 *   random, stamped and checked, a quarter of the releases stream-ordered behind a fill of the block;
 * - this thread: every `--replan` operations a re-plan as adaptive mode makes one (record a window of
 *   `--window` events, 10^6 by default, train size classes from it, prepare the switch off this thread,
 *   install it at a mark, the retired arena's free pages given back), and RSS sampled every second. A
 *   shorter window sees fewer of the threads' phases together, and its plans vary more from one to the next.
 * `--driver native` runs bench/native/soak.cc instead: the core alone, `--threads` native threads each
 * allocating at random with stream-ordered releases of their own, no Node.js in between.
 *
 * RSS growth compares the median of the last 10 one-second samples with the median of the 10 samples that
 * follow the warm-up (the first quarter of the run, which holds the first re-plans); as every re-plan sizes a
 * new arena from its own window, RSS steps with the plan, and the trend (least squares) is printed too.
 * RSS not held by the pool (the leak measure) is broken down (node driver) into glibc's heap, its blocks in
 * use and the memory it holds free (memoryUsage()), and V8's heaps.
 *
 *   npm run build && npx tsx bench/soak.ts [--ops 1e8] [--threads 4] [--workers 2] [--replan 1e7]
 *                                          [--window 1e6] [--driver node|native] [--json out.json] [trace ...]
 * Traces default to the repository's fixtures (resnet18 training, five torch inference passes, six OCR shapes).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { getHeapStatistics } from 'node:v8';
import { Worker } from 'node:worker_threads';

import { Pool, memoryUsage, readTrace, train } from '../dist/index.js';
import { native } from '../dist/native.js';
import { toNativePlan } from '../dist/plan/plan-spec.js';
import { nativePoolOf } from '../dist/pool/pool.js';
import { formatTable, round } from '../dist/report/table.js';
import { median } from '../dist/report/stats.js';
import { benchArgs, optionChecks, printHeader, writeJson } from './harness.js';

const args = benchArgs(1, {
  ops: { type: 'string' },
  threads: { type: 'string' },
  workers: { type: 'string' },
  replan: { type: 'string' },
  driver: { type: 'string' },
  window: { type: 'string' },
});
const ops = Number(args.values.ops ?? 1e8);
const threads = Number(args.values.threads ?? 4);
const workers = Number(args.values.workers ?? 2);
const replan = Number(args.values.replan ?? 1e7);
const driver = optionChecks('soak', args).choice('driver', ['node', 'native'] as const, 'node');
const replanWindow = Number(args.values.window ?? 1e6);
for (const [flag, value, min] of [['--ops', ops, 1], ['--threads', threads, 1], ['--workers', workers, 0], ['--replan', replan, 1], ['--window', replanWindow, 1]] as const) {
  const integer = flag === '--threads' || flag === '--workers' || flag === '--window';
  if (!Number.isFinite(value) || value < min || (integer && !Number.isInteger(value))) {
    console.error(`${flag} must be ${min === 0 ? 'a non-negative' : 'a positive'} ${integer ? 'integer' : 'number'}, got ${String(args.values[flag.slice(2)])}`);
    process.exit(2);
  }
}
// The replays and the switch preparation each hold a libuv thread: the pool must have room for all of them,
// and its size is read once, at its first use, so this process starts again with it set.
const uvThreads = threads + 2;
if (driver === 'node' && Number(process.env.UV_THREADPOOL_SIZE ?? 4) < uvThreads) {
  const child = spawnSync(process.execPath, [...process.execArgv, ...process.argv.slice(1)], {
    stdio: 'inherit',
    env: { ...process.env, UV_THREADPOOL_SIZE: String(uvThreads) },
  });
  process.exit(child.status ?? 1);
}
const who = driver === 'node' ? `${threads} native threads and ${workers} worker_threads` : `${threads} native threads (core only)`;
const machine = printHeader(`soak: ${ops.toExponential(0)} operations from ${who} on one pool`);

const root = path.resolve(__dirname, '..');
const fixtures = path.join(root, 'test/fixtures/traces');
const traceFiles = args.positionals.length
  ? args.positionals
  : ['resnet18_train/trace.json.gz', ...fs.readdirSync(path.join(fixtures, 'torch_infer')).map((f) => `torch_infer/${f}`),
     ...fs.readdirSync(path.join(fixtures, 'ocr_det_infer')).map((f) => `ocr_det_infer/${f}`)].map((f) => path.join(fixtures, f));
const traces = traceFiles.map((file) => readTrace(file));
const sizes: number[] = [];
for (const trace of traces) for (const size of trace.sizes) sizes.push(size);
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
  /** The node driver: what RSS not held by the pool is made of, sampled with RSS (glibc's heap: blocks in
   * use and held free; V8's heaps). */
  parts?: { cHeapInUseMiB: number[]; cHeapFreeMiB: number[]; v8HeapMiB: number[] };
  /** The node driver: operations by the replays (native threads) and by the workers. */
  byNativeThreads?: number;
  byWorkers?: number;
}

// bench/native/soak.cc, given the sizes in a file.
function nativeSoak(): SoakResult {
  const program = path.join(root, 'build-native/tp_soak');
  if (!fs.existsSync(program)) {
    execFileSync('cmake', ['-S', root, '-B', path.join(root, 'build-native'), '-DCMAKE_BUILD_TYPE=RelWithDebInfo'], { stdio: 'ignore' });
    execFileSync('cmake', ['--build', path.join(root, 'build-native'), '--target', 'tp_soak'], { stdio: 'ignore' });
  }
  const sizesFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'tp-soak-')), 'sizes.txt');
  fs.writeFileSync(sizesFile, sizes.join('\n') + '\n');
  try {
    return JSON.parse(execFileSync(program, [sizesFile, String(ops), String(threads), String(replan)], { encoding: 'utf8' }));
  } catch (error) {
    const out = (error as { stdout?: string }).stdout;
    if (!out) throw error;
    return JSON.parse(out); // exit 1: corruptions or failures, reported below
  } finally {
    fs.rmSync(path.dirname(sizesFile), { recursive: true, force: true });
  }
}

async function nodeSoak(): Promise<SoakResult> {
  const MiB = 2 ** 20;
  const pool = new Pool({ growReserve: 16 * 2 ** 30 });
  const handle = nativePoolOf(pool);
  const stop = new SharedArrayBuffer(4);
  const counters = Array.from({ length: workers }, () => new SharedArrayBuffer(3 * 8));
  const finished = counters.map(
    (counter, i) =>
      new Promise<void>((resolve, reject) => {
        const worker = new Worker(path.join(__dirname, 'soak-worker.cjs'), {
          workerData: { shared: pool.share(), sizes, seed: 0x9e3779b9 + i, stop, counters: counter },
        });
        worker.on('message', (m: { done: boolean; error?: string }) => (m.done ? resolve() : reject(new Error(m.error))));
        worker.on('error', reject);
      }),
  );
  const workerCounts = () => counters.map((c) => new Float64Array(c)).reduce((t, c) => t.map((v, k) => v + c[k]!), [0, 0, 0]);

  let stopped = false;
  let replayOps = 0, replayCorruptions = 0, failures = 0;
  const replays = Array.from({ length: threads }, async (_, i) => {
    const trace = traces[i % traces.length]!;
    const replayer = new native.NativeReplayer(handle, trace.ops, trace.eventBuffer, trace.sizes, { touch: 'verify', iterationMarks: false, unmarked: true });
    while (!stopped) {
      try {
        const r = await replayer.runAsync(false);
        replayOps += r.allocs + r.releases;
        replayCorruptions += r.corruptions;
      } catch {
        failures++;
      }
    }
  });

  let replans = 0, replanFailures = 0, replanning = false, nextReplan = replan;
  const replanOnce = async (): Promise<void> => {
    pool.record({ maxEvents: 2 * replanWindow });
    while (!stopped && pool.stats().recording.on && pool.stats().recording.events < replanWindow) await sleep(5);
    const window = pool.stopRecording('soak window');
    if (window.sizes.length === 0) return;
    // Threads interleave differently in every window: classes only, no schedule.
    const plan = train(window, { interval: 4096, order: 'alloc-time', share: false });
    await handle.prepareSwitch(toNativePlan({ interval: plan.interval, classes: plan.classes }));
    pool.markIteration(); // installs it; the retired arena's free pages go back off this thread
  };

  const rssMiB: number[] = [], poolMiB: number[] = [];
  const parts = { cHeapInUseMiB: [] as number[], cHeapFreeMiB: [] as number[], v8HeapMiB: [] as number[] };
  const start = process.hrtime.bigint();
  let nextSample = 0;
  for (;;) {
    const stats = pool.stats();
    const done = stats.allocs + stats.releases;
    const seconds = Number(process.hrtime.bigint() - start) / 1e9;
    if (seconds >= nextSample) {
      const memory = memoryUsage();
      rssMiB.push(memory.rss / MiB);
      poolMiB.push((stats.committedBytes + stats.osLiveBytes) / MiB);
      parts.cHeapInUseMiB.push(memory.cHeapInUse / MiB);
      parts.cHeapFreeMiB.push(memory.cHeapFree / MiB);
      parts.v8HeapMiB.push(getHeapStatistics().total_heap_size / MiB);
      nextSample++;
      process.stdout.write(`\r# ${round(seconds, 0)} s: ${(done / 1e6).toFixed(1)}M operations, ${replans} re-plans   `);
    }
    if (done >= ops) break;
    if (!replanning && done >= nextReplan) {
      replanning = true;
      nextReplan += replan;
      replanOnce().then(
        () => void replans++,
        (error: unknown) => {
          replanFailures++;
          console.error(`\n# re-plan failed: ${String(error)}`);
        },
      ).finally(() => (replanning = false));
    }
    await sleep(100);
  }
  stopped = true;
  Atomics.store(new Int32Array(stop), 0, 1);
  await Promise.all(replays);
  await Promise.all(finished);
  while (replanning) await sleep(10);
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  process.stdout.write('\n');
  const [workerOps, workerCorruptions, workerFailures] = workerCounts() as [number, number, number];
  pool.reclaim(); // the workers' last stream-ordered releases: their streams have passed them
  const stats = pool.stats();
  pool.close();
  return {
    operations: stats.allocs + stats.releases,
    seconds,
    corruptions: replayCorruptions + workerCorruptions,
    failures: failures + workerFailures,
    replans,
    replanFailures,
    allocs: stats.allocs,
    osFallbacks: stats.osFallbacks,
    liveBlocksAtEnd: stats.liveBlocks,
    deferredAtEnd: stats.deferredPending,
    switches: stats.switches,
    peakLiveMiB: stats.peakBytesLive / MiB,
    rssMiB,
    poolMiB,
    parts,
    byNativeThreads: replayOps,
    byWorkers: workerOps,
  };
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function report(result: SoakResult): void {
  const rss = result.rssMiB;
  const warm = Math.floor(rss.length / 4);
  // Each re-plan sizes the arena anew from its own window, so RSS steps with the serving plan. What the pool
  // does not hold (RSS less its committed arenas and live OS blocks: the runtime, the C heap, anything
  // leaked) has no reason to step: its growth is the leak measure. Both are printed.
  const rssGrowth = growth(rss, warm);
  const unheld = growth(rss.map((v, k) => v - (result.poolMiB[k] ?? 0)), warm);
  console.log(
    formatTable(
      ['operations', 'seconds', 'ops/s', 'corruptions', 'failures', 're-plans', 'OS fallbacks', 'peak live MiB', 'RSS max in warm-up MiB'],
      [[result.operations, round(result.seconds, 1), Math.round(result.operations / result.seconds), result.corruptions, result.failures,
        `${result.replans} (${result.replanFailures} failed)`, result.osFallbacks, round(result.peakLiveMiB, 1), round(Math.max(...rss.slice(0, warm + 1)), 0)]],
    ),
  );
  console.log(
    formatTable(
      ['MiB', 'after warm-up', 'at end', 'growth (medians)', 'trend over the run after warm-up', 'min-max after warm-up'],
      [
        ['RSS', ...growthRow(rssGrowth)],
        ['RSS not held by the pool', ...growthRow(unheld)],
        // Of which (the C heap also holds the pool's small OS fallbacks, counted as held by the pool):
        ...(result.parts
          ? [
              ['  C heap, in use', ...growthRow(growth(result.parts.cHeapInUseMiB, warm))],
              ['  C heap, held free', ...growthRow(growth(result.parts.cHeapFreeMiB, warm))],
              ['  V8 heaps', ...growthRow(growth(result.parts.v8HeapMiB, warm))],
            ]
          : []),
      ],
    ),
  );
  console.log(`# blocks live at the end ${result.liveBlocksAtEnd}, deferred ${result.deferredAtEnd}; ${rss.length} RSS samples; warm-up: the first ${warm}`);
  if (result.byNativeThreads !== undefined) {
    console.log(`# operations by the native threads (replays) ${result.byNativeThreads}, by the worker_threads ${result.byWorkers}`);
  }
  const { after, end, trendGrowth } = rssGrowth;
  writeJson(args.json, { benchmark: 'soak', machine, driver, threads, workers: driver === 'node' ? workers : 0, ops, replan, traces: traceFiles, result, rss: { after, end, trendGrowth }, rssNotHeldByPool: unheld });
  process.exitCode = result.corruptions === 0 && result.failures === 0 ? 0 : 1;
}

interface Growth {
  after: number; // median of the 10 samples after the warm-up
  end: number; // median of the last 10
  trendGrowth: number; // least squares over the samples after warm-up, as a fraction of `after`; NaN under 20 samples
  min: number;
  max: number;
}

function growth(samples: number[], warm: number): Growth {
  const after = median(samples.slice(warm, warm + 10)), end = median(samples.slice(-10));
  const tail = samples.slice(warm);
  const meanX = (tail.length - 1) / 2, meanY = tail.reduce((a, b) => a + b, 0) / tail.length;
  const slope = tail.reduce((a, y, x) => a + (x - meanX) * (y - meanY), 0) / tail.reduce((a, _, x) => a + (x - meanX) ** 2, 0);
  return { after, end, trendGrowth: tail.length >= 20 ? (slope * (tail.length - 1)) / after : NaN, min: Math.min(...tail), max: Math.max(...tail) };
}

function growthRow(g: Growth): (string | number)[] {
  return [round(g.after, 1), round(g.end, 1), `${round((g.end / g.after - 1) * 100, 2)}%`,
          Number.isNaN(g.trendGrowth) ? 'n/a (under 20 samples)' : `${round(g.trendGrowth * 100, 2)}%`, `${round(g.min, 0)}-${round(g.max, 0)}`];
}

(driver === 'node' ? nodeSoak() : Promise.resolve(nativeSoak())).then(report, (error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});

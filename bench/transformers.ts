/**
 * @huggingface/transformers (transformers.js) pipelines with no code change: bench/transformers-app.mjs, a
 * feature-extraction pipeline as users write one (texts of random lengths in batches of random sizes, the
 * same seeded sequence everywhere), runs on a text encoder built here (./transformers-model.ts: the
 * benches' encoder, a made-up WordPiece vocabulary, no download) under each configuration, one process each:
 *
 *   arena                  node app.mjs: ONNX Runtime's CPU arena and memory pattern (transformers.js's defaults)
 *   tensorpool             `tensorpool run -- node app.mjs`: zero configuration (the Node hook turns the
 *                          arena and the memory pattern off and marks each session.run())
 *   tensorpool-adaptive    `tensorpool run --adaptive -- node app.mjs`
 *   tensorpool-decay-off   `tensorpool run --decay off -- node app.mjs`: free memory is never given back
 *   jemalloc, mimalloc,    node app.mjs with the peer LD_PRELOADed (the arena stays on: the app is unchanged;
 *   tcmalloc               bench/install-peers.sh installs them)
 *
 * @huggingface/transformers is not a dependency of tensorpool (it is heavy): --transformers DIR names a
 * directory where it is installed (npm install --ignore-scripts --prefix DIR @huggingface/transformers@4).
 * Rounds interleave the configurations (their order rotated each round). Reported per configuration (medians
 * over rounds): RSS once the pipeline is made, peak RSS (VmHWM, the whole process), RSS at the end, growth
 * from the end of the warm-up to the end, ms and minor page faults per run after the warm-up; each one's
 * ratio to the arena's of the same round (median over rounds, 95% interval) for the peak, ms and faults;
 * and under tensorpool the iterations the pool counted (`--stats`), which must equal the runs (the hook
 * marks each). Outputs (a SHA-256 of every output's bytes) must be the same in every configuration and
 * round: the bench fails otherwise.
 *
 *   npm run build && npx tsx bench/transformers.ts --transformers DIR [--runs 200] [--warmup 20]
 *       [--rounds 6] [--configs arena,tensorpool] [--seed 7] [--json out.json]   (--quick: 40 runs, 2 rounds)
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { preloadLibrary } from '../dist/index.js';
import { missingMessage, resolveAllocator } from '../dist/replay/allocators.js';
import { formatBytes, formatInterval, formatTable, round } from '../dist/report/table.js';
import { median, medianInterval, pairedRatios, type MedianInterval } from '../dist/report/stats.js';
import { benchArgs, optionChecks, printHeader, writeJson } from './harness.js';
import { writeTextEncoder } from './transformers-model.js';

const CONFIGS = ['arena', 'tensorpool', 'tensorpool-adaptive', 'tensorpool-decay-off', 'jemalloc', 'mimalloc', 'tcmalloc'] as const;
type ConfigName = (typeof CONFIGS)[number];
/** The configurations under `tensorpool run`, and its options. */
const RUN_OPTIONS: Partial<Record<ConfigName, string[]>> = { tensorpool: [], 'tensorpool-adaptive': ['--adaptive'], 'tensorpool-decay-off': ['--decay', 'off'] };
const INSTALL = 'npm install --ignore-scripts --prefix DIR @huggingface/transformers@4';

const args = benchArgs(1, {
  transformers: { type: 'string' },
  runs: { type: 'string' },
  warmup: { type: 'string' },
  rounds: { type: 'string' },
  configs: { type: 'string' },
  seed: { type: 'string' },
  'timeout-seconds': { type: 'string' },
});
const checks = optionChecks('transformers', args);
// Annotated: a call narrows what follows only through a name declared with its type.
const fail: (message: string) => never = checks.fail;
const integer = checks.integer;
const transformersDir = args.values.transformers === undefined ? fail(`--transformers DIR is needed: a directory where @huggingface/transformers is installed (${INSTALL})`) : path.resolve(String(args.values.transformers));
if (!fs.existsSync(path.join(transformersDir, 'node_modules/@huggingface/transformers/package.json'))) {
  fail(`no @huggingface/transformers in ${transformersDir}/node_modules: install it with ${INSTALL.replace('DIR', transformersDir)}`);
}
const runs = integer('runs', args.quick ? 40 : 200, 2);
const warmup = integer('warmup', Math.floor(runs / 10), 0);
if (warmup >= runs) fail(`--warmup (${warmup}) must be less than --runs (${runs})`);
const rounds = integer('rounds', args.quick ? 2 : 6, 1);
const seed = integer('seed', 7, 0);
const timeoutSeconds = integer('timeout-seconds', 120, 1);
const configs = String(args.values.configs ?? 'arena,tensorpool').split(',') as ConfigName[];
for (const c of configs) if (!CONFIGS.includes(c)) fail(`unknown configuration ${JSON.stringify(c)} (known: ${CONFIGS.join(', ')})`);
if (!configs.includes('arena')) fail('the arena is what every ratio is to: keep it in --configs');

const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-transformers-bench-'));
const cli = path.resolve(__dirname, '../dist/cli/main.js');
const app = path.join(__dirname, 'transformers-app.mjs');

/** The command line of a configuration, or why it cannot run here. */
function command(name: ConfigName): { argv: string[]; env: NodeJS.ProcessEnv } | string {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const key of Object.keys(env)) if (key === 'LD_PRELOAD' || key === 'NODE_OPTIONS' || key.startsWith('TENSORPOOL_')) delete env[key];
  Object.assign(env, {
    TRANSFORMERS_DIR: transformersDir,
    TRANSFORMERS_MODELS: scratch,
    TRANSFORMERS_MODEL: 'text-encoder',
    APP_RUNS: String(runs),
    APP_WARMUP: String(warmup),
    APP_SEED: String(seed),
  });
  const node = [process.execPath, app];
  if (name === 'arena') return { argv: node, env };
  const options = RUN_OPTIONS[name];
  if (options) {
    if (!fs.existsSync(preloadLibrary)) return `the preload library is not built (${preloadLibrary})`;
    return { argv: [process.execPath, cli, 'run', '--stats', ...options, '--', ...node], env };
  }
  const spec = resolveAllocator(name as 'jemalloc' | 'mimalloc' | 'tcmalloc');
  return spec.library ? { argv: node, env: { ...env, LD_PRELOAD: spec.library } } : missingMessage(spec);
}

interface Snapshot {
  rss: number;
  hwm: number;
  faults: number;
  ms: number;
}
interface Outcome {
  readyRss: number;
  peakRss: number;
  endRss: number;
  growth: number; // RSS at the end / RSS at the end of the warm-up - 1
  msPerRun: number;
  faultsPerRun: number;
  iterations: number | null; // as `tensorpool run --stats` counted them
  outputs: string;
}

function measure(how: { argv: string[]; env: NodeJS.ProcessEnv }): Promise<Outcome> {
  return new Promise((resolve, reject) => {
    const child = spawn(how.argv[0], how.argv.slice(1), { env: how.env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutSeconds * 1000);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      const line = stdout.split('\n').find((l) => l.startsWith('{'));
      if (code !== 0 || !line) {
        const why = signal === 'SIGKILL' ? `still running after ${timeoutSeconds} s (--timeout-seconds)` : `exit ${code ?? signal}`;
        return reject(new Error(`the app failed (${why}): ${stderr.trim().split('\n').slice(-3).join(' | ')}`));
      }
      const { pid, ready, warm, end, outputs } = JSON.parse(line) as { pid: number; ready: Snapshot; warm: Snapshot; end: Snapshot; outputs: string };
      const counted = new RegExp(`process pool \\(pid ${pid},.*iterations (\\d+)`).exec(stderr);
      const measured = runs - warmup;
      resolve({
        readyRss: ready.rss,
        peakRss: end.hwm,
        endRss: end.rss,
        growth: end.rss / warm.rss - 1,
        msPerRun: (end.ms - warm.ms) / measured,
        faultsPerRun: (end.faults - warm.faults) / measured,
        iterations: counted ? Number(counted[1]) : null,
        outputs,
      });
    });
  });
}

async function main(): Promise<void> {
  const machine = printHeader('transformers.js feature-extraction pipelines, unchanged, under each configuration');
  const version = JSON.parse(fs.readFileSync(path.join(transformersDir, 'node_modules/@huggingface/transformers/package.json'), 'utf8')).version as string;
  const ortPackage = path.join(transformersDir, 'node_modules/onnxruntime-node/package.json');
  const ortVersion = fs.existsSync(ortPackage) ? (JSON.parse(fs.readFileSync(ortPackage, 'utf8')).version as string) : '?';
  writeTextEncoder(scratch, 'text-encoder');
  console.log(`# @huggingface/transformers ${version} (onnxruntime-node ${ortVersion}) in ${transformersDir}; ${runs} runs (${warmup} warm up) x ${rounds} rounds, seed ${seed}`);
  const outcomes = new Map<ConfigName, (Outcome | null)[]>(configs.map((c) => [c, []]));
  const errors = new Map<ConfigName, string>();
  const crashed = new Set<ConfigName>(); // ran and failed (not: could not run here)
  for (let r = 0; r < rounds; r++) {
    const order = configs.map((_, i) => configs[(i + r) % configs.length]);
    for (const name of order) {
      const how = command(name);
      let outcome: Outcome | null = null;
      if (typeof how === 'string') errors.set(name, how);
      else {
        try {
          outcome = await measure(how);
        } catch (error) {
          errors.set(name, (error as Error).message.split('\n')[0]);
          crashed.add(name);
        }
      }
      outcomes.get(name)!.push(outcome);
      if (outcome) {
        const marks = outcome.iterations === null ? '' : `, ${outcome.iterations} iterations`;
        console.log(`# round ${r + 1} ${name}: peak ${formatBytes(outcome.peakRss)}, ${outcome.msPerRun.toFixed(1)} ms/run, ${outcome.faultsPerRun.toFixed(1)} faults/run${marks}`);
      } else console.log(`# round ${r + 1} ${name}: ${errors.get(name)}`);
    }
  }

  const arena = outcomes.get('arena')!;
  const ratio = (name: ConfigName, pick: (o: Outcome) => number): MedianInterval | null => {
    const pairs = outcomes.get(name)!.map((o, r) => [o, arena[r]] as const).filter((p): p is readonly [Outcome, Outcome] => p[0] !== null && p[1] !== null);
    return pairs.length ? medianInterval(pairedRatios(pairs.map(([o]) => pick(o)), pairs.map(([, a]) => pick(a)))) : null;
  };
  const referenceName = configs.find((c) => outcomes.get(c)!.some((o) => o)) ?? 'arena';
  const reference = outcomes.get(referenceName)!.find((o) => o)?.outputs;
  const problems = [...crashed].map((name) => `${name}: ${errors.get(name)}`);
  const results = configs.map((name) => {
    const done = outcomes.get(name)!.filter((o): o is Outcome => o !== null);
    if (done.length === 0) return { name, error: errors.get(name) ?? 'no result' };
    const med = (pick: (o: Outcome) => number) => median(done.map(pick));
    const sameOutputs = done.every((o) => o.outputs === reference);
    if (!sameOutputs) problems.push(`${name}: outputs differ from ${referenceName}'s (first round)`);
    const iterations = RUN_OPTIONS[name] ? done.map((o) => o.iterations) : null;
    if (iterations?.some((n) => n !== runs)) problems.push(`${name}: the pool counted ${iterations.join(', ')} iterations, not ${runs} (one a run): the hook did not mark every run`);
    return {
      name,
      rounds: done.length,
      readyRss: med((o) => o.readyRss),
      peakRss: med((o) => o.peakRss),
      endRss: med((o) => o.endRss),
      growth: med((o) => o.growth),
      msPerRun: med((o) => o.msPerRun),
      faultsPerRun: med((o) => o.faultsPerRun),
      peakVsArena: ratio(name, (o) => o.peakRss),
      msVsArena: ratio(name, (o) => o.msPerRun),
      faultsVsArena: ratio(name, (o) => o.faultsPerRun),
      iterations,
      sameOutputs,
      outcomes: outcomes.get(name),
    };
  });
  const headers = ['configuration', 'ready RSS', 'peak RSS', 'end RSS', 'growth', 'ms/run', 'faults/run', 'peak vs arena', 'ms vs arena', 'faults vs arena', 'iterations', 'outputs'];
  const rows = results.map((r) =>
    'error' in r
      ? [r.name, `(${r.error})`]
      : [
          r.name,
          formatBytes(r.readyRss),
          formatBytes(r.peakRss),
          formatBytes(r.endRss),
          `${(100 * r.growth).toFixed(1)}%`,
          round(r.msPerRun, 1),
          round(r.faultsPerRun, 1),
          r.peakVsArena && formatInterval(r.peakVsArena),
          r.msVsArena && formatInterval(r.msVsArena),
          r.faultsVsArena && formatInterval(r.faultsVsArena),
          r.iterations ? [...new Set(r.iterations)].join('/') : '',
          r.sameOutputs ? 'same' : 'DIFFER',
        ],
  );
  console.log(formatTable(headers, rows));
  // Too few rounds for 95% (fewer than 6): the interval is the whole range, at the confidence it has.
  const confidence = medianInterval(new Array<number>(rounds).fill(0)).confidence;
  const interval = confidence < 0.95 ? `the range of the ${rounds} rounds: ${(100 * confidence).toFixed(1)}% confidence` : '95% interval';
  console.log(`# medians over rounds; ratios: each round paired with the arena's of the same round, median (${interval}); ms, faults (minor, the app's process) and growth after the first ${warmup} runs; iterations: tensorpool run --stats (must be ${runs})`);
  writeJson(args.json, { machine, transformers: version, onnxruntimeNode: ortVersion, runs, warmup, rounds, seed, results });
  for (const problem of problems) console.error(`transformers bench: FAILED: ${problem}`);
  if (problems.length || !arena.some((o) => o)) process.exitCode = 1;
}

main()
  .catch((error) => {
    console.error(error);
    process.exitCode = 1;
  })
  .finally(() => fs.rmSync(scratch, { recursive: true, force: true }));

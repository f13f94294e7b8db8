/**
 * What the benches of unchanged applications share (bench/transformers.ts, bench/ocr-pipeline.ts): an app
 * that knows nothing of tensorpool runs once per configuration and round, one process each, rounds
 * interleaved (the order rotated each round):
 *
 *   arena                  node APP: ONNX Runtime's CPU arena and memory pattern (onnxruntime-node's defaults)
 *   tensorpool[-…]         `tensorpool run --stats [options] -- node APP` (the Node hook turns the arena and the
 *                          memory pattern off and marks each session.run())
 *   jemalloc, mimalloc,    node APP with the peer LD_PRELOADed (the arena stays on: the app is unchanged;
 *   tcmalloc               bench/install-peers.sh installs them)
 *
 * The app prints one JSON line at the end: its pid, `sessionRuns` (its session.run() calls), snapshots
 * {rss, hwm, faults, ms} once ready, at the end of the warm-up and at the end, and `outputs` (a SHA-256 of every
 * output's bytes). Reported per configuration (medians over rounds): RSS once ready, peak RSS (VmHWM), RSS at the
 * end, growth from the end of the warm-up to the end, ms and minor page faults per run after the warm-up; the
 * peak's, ms' and faults' ratios to the arena's of the same round (median over rounds, 95% interval); under
 * tensorpool the iterations the pool counted, which must equal the app's session runs (the hook marks each).
 * Outputs must be the same in every configuration and round: the bench fails otherwise.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { preloadLibrary } from '../dist/index.js';
import { missingMessage, resolveAllocator } from '../dist/replay/allocators.js';
import type { MachineInfo } from '../dist/report/machine.js';
import { median, medianInterval, pairedRatios, type MedianInterval } from '../dist/report/stats.js';
import { formatBytes, formatInterval, formatTable, round } from '../dist/report/table.js';
import { optionChecks, writeJson, type BenchArgs } from './harness.js';

export const PEERS = ['jemalloc', 'mimalloc', 'tcmalloc'] as const;

/** The options every bench of an unchanged app takes (with benchArgs' own). */
export const APP_BENCH_OPTIONS = {
  runs: { type: 'string' },
  warmup: { type: 'string' },
  rounds: { type: 'string' },
  configs: { type: 'string' },
  seed: { type: 'string' },
  'timeout-seconds': { type: 'string' },
} as const;

/**
 * APP_BENCH_OPTIONS read and checked (a bad one ends the process with code 2, `NAME bench: …`): --runs
 * (`runs`, `quickRuns` with --quick), --warmup (`warmup(runs)`), --rounds (6; 2 with --quick), --seed (7),
 * --timeout-seconds, --configs (arena,tensorpool; each among `known`, the arena among them).
 */
export function appBenchSettings(
  name: string,
  args: BenchArgs,
  known: readonly string[],
  defaults: { runs: number; quickRuns: number; warmup: (runs: number) => number; timeoutSeconds: number },
) {
  const { fail, integer, names } = optionChecks(name, args);
  const runs = integer('runs', args.quick ? defaults.quickRuns : defaults.runs, 2);
  const warmup = integer('warmup', defaults.warmup(runs), 0);
  if (warmup >= runs) fail(`--warmup (${warmup}) must be less than --runs (${runs})`);
  const configs = names('configs', known, ['arena', 'tensorpool']);
  if (!configs.includes('arena')) fail('the arena is what every ratio is to: keep it in --configs');
  return {
    fail,
    integer,
    runs,
    warmup,
    rounds: integer('rounds', args.quick ? 2 : 6, 1),
    seed: integer('seed', 7, 0),
    timeoutSeconds: integer('timeout-seconds', defaults.timeoutSeconds, 1),
    configs,
  };
}

export interface AppBench {
  /** In messages: `NAME bench: FAILED: …`. */
  name: string;
  /** The app's script (node runs it) and what it reads from its environment. */
  app: string;
  env: NodeJS.ProcessEnv;
  /** The configurations to run, in order; 'arena' must be among them (every ratio is to it). */
  configs: readonly string[];
  /** The `tensorpool run` configurations and their options. */
  runOptions: Readonly<Record<string, readonly string[]>>;
  /** Runs per process, of which the first `warmup` are left out of the per-run figures (the app's, for the report). */
  runs: number;
  warmup: number;
  rounds: number;
  timeoutSeconds: number;
  machine: MachineInfo;
  /** Written into --json beside the results. */
  json: { file: string | undefined; extra: Record<string, unknown> };
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
  sessionRuns: number;
  iterations: number | null; // as `tensorpool run --stats` counted them
  outputs: string;
}

/** The command line of a configuration, or why it cannot run here. */
function command(bench: AppBench, name: string): { argv: string[]; env: NodeJS.ProcessEnv } | string {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const key of Object.keys(env)) if (key === 'LD_PRELOAD' || key === 'NODE_OPTIONS' || key.startsWith('TENSORPOOL_')) delete env[key];
  Object.assign(env, bench.env, { APP_RUNS: String(bench.runs), APP_WARMUP: String(bench.warmup) });
  const node = [process.execPath, bench.app];
  if (name === 'arena') return { argv: node, env };
  const options = bench.runOptions[name];
  if (options) {
    if (!fs.existsSync(preloadLibrary)) return `the preload library is not built (${preloadLibrary})`;
    const cli = path.resolve(__dirname, '../dist/cli/main.js');
    return { argv: [process.execPath, cli, 'run', '--stats', ...options, '--', ...node], env };
  }
  const spec = resolveAllocator(name as (typeof PEERS)[number]);
  return spec.library ? { argv: node, env: { ...env, LD_PRELOAD: spec.library } } : missingMessage(spec);
}

function measure(bench: AppBench, how: { argv: string[]; env: NodeJS.ProcessEnv }): Promise<Outcome> {
  return new Promise((resolve, reject) => {
    const child = spawn(how.argv[0], how.argv.slice(1), { env: how.env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), bench.timeoutSeconds * 1000);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      const line = stdout.split('\n').find((l) => l.startsWith('{'));
      if (code !== 0 || !line) {
        const why = signal === 'SIGKILL' ? `still running after ${bench.timeoutSeconds} s (--timeout-seconds)` : `exit ${code ?? signal}`;
        return reject(new Error(`the app failed (${why}): ${stderr.trim().split('\n').slice(-3).join(' | ')}`));
      }
      const out = JSON.parse(line) as { pid: number; sessionRuns: number; ready: Snapshot; warm: Snapshot; end: Snapshot; outputs: string };
      const counted = new RegExp(`process pool \\(pid ${out.pid},.*iterations (\\d+)`).exec(stderr);
      const measured = bench.runs - bench.warmup;
      resolve({
        readyRss: out.ready.rss,
        peakRss: out.end.hwm,
        endRss: out.end.rss,
        growth: out.end.rss / out.warm.rss - 1,
        msPerRun: (out.end.ms - out.warm.ms) / measured,
        faultsPerRun: (out.end.faults - out.warm.faults) / measured,
        sessionRuns: out.sessionRuns,
        iterations: counted ? Number(counted[1]) : null,
        outputs: out.outputs,
      });
    });
  });
}

/** Runs the rounds, prints the table, writes --json; the process's exit code 1 when a check failed. */
export async function runAppBench(bench: AppBench): Promise<void> {
  const { configs, rounds } = bench;
  const outcomes = new Map<string, (Outcome | null)[]>(configs.map((c) => [c, []]));
  const errors = new Map<string, string>();
  const crashed = new Set<string>(); // ran and failed (not: could not run here)
  for (let r = 0; r < rounds; r++) {
    const order = configs.map((_, i) => configs[(i + r) % configs.length]);
    for (const name of order) {
      const how = command(bench, name);
      let outcome: Outcome | null = null;
      if (typeof how === 'string') errors.set(name, how);
      else {
        try {
          outcome = await measure(bench, how);
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
  const ratio = (name: string, pick: (o: Outcome) => number): MedianInterval | null => {
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
    const iterations = bench.runOptions[name] ? done.map((o) => o.iterations) : null;
    if (iterations && done.some((o) => o.iterations !== o.sessionRuns)) {
      problems.push(`${name}: the pool counted ${iterations.join(', ')} iterations for ${done.map((o) => o.sessionRuns).join(', ')} session runs: the hook did not mark every run`);
    }
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
  console.log(
    `# medians over rounds; ratios: each round paired with the arena's of the same round, median (${interval}); ms, faults (minor, the app's process) and growth after the first ${bench.warmup} runs; iterations: tensorpool run --stats (must equal the app's session runs)`,
  );
  writeJson(bench.json.file, { machine: bench.machine, ...bench.json.extra, runs: bench.runs, warmup: bench.warmup, rounds, results });
  for (const problem of problems) console.error(`${bench.name} bench: FAILED: ${problem}`);
  if (problems.length || !arena.some((o) => o)) process.exitCode = 1;
}

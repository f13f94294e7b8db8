/**
 * PyTorch under each process allocator: the slot PyTorch's tuning guide gives jemalloc or tcmalloc
 * (LD_PRELOAD), taken by `tensorpool run`. A real workload (bench/torch/steps.py: cnn and lstm training,
 * encoder inference over six sequence lengths; and, by --models only, as their steps take seconds,
 * transformer-encoder training: encoder-train, encoder-lm), one process per configuration and round, rounds
 * interleaved:
 *
 *   glibc                    the C library's malloc (torch's default)
 *   jemalloc, mimalloc,      LD_PRELOADed (bench/install-peers.sh)
 *   tcmalloc
 *   tensorpool-run           `tensorpool run` (the preload library on its default classes)
 *   tensorpool-run-jemalloc  `tensorpool run --with jemalloc` (jemalloc below the threshold)
 *   tensorpool-run-planned   `tensorpool run --plan`, the plan trained (order auto) from a `tensorpool run
 *                            --record` of the same workload
 *   tensorpool-run-planned-jemalloc  `tensorpool run --plan --with jemalloc`, the same plan
 *
 * Each process times its own steps (Python's start-up and the model's construction are not measured); the
 * steady state is the second half of its steps. Per configuration: ms per step (median and p95 over every
 * round's steady steps; the mean weighs every shape of a workload whose steps differ), minor page faults
 * per step (median), peak RSS (median over rounds, and their range), each step's time over the fastest
 * peer's step of the same round and number (the median ratio and its 95% interval), and whether the result
 * (the trained parameters' sum, or the last output's) is bit-equal to glibc's. Needs a python3 with torch
 * (Debian: python3-torch); --python names one.
 *
 *   npm run build && npx tsx bench/torch.ts [--models cnn,lstm,encoder] [--steps 40] [--reps 3]
 *       [--threads 2] [--configs LIST] [--python PATH] [--script FILE] [--json out.json]
 *
 * --script runs your own workload instead: `python SCRIPT MODEL STEPS THREADS` for each of --models, its
 * last line of stdout the JSON line steps.py prints.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { preloadLibrary, readTrace, train } from '../dist/index.js';
import { resolveAllocator } from '../dist/replay/allocators.js';
import { median, medianInterval, pairedRatios, quantile } from '../dist/report/stats.js';
import { formatBytes, formatInterval, formatTable, round } from '../dist/report/table.js';
import { benchArgs, optionChecks, printHeader, writeJson } from './harness.js';

const CONFIGS = ['glibc', 'jemalloc', 'mimalloc', 'tcmalloc', 'tensorpool-run', 'tensorpool-run-jemalloc', 'tensorpool-run-planned', 'tensorpool-run-planned-jemalloc'] as const;
type ConfigName = (typeof CONFIGS)[number];
const PEERS = ['jemalloc', 'mimalloc', 'tcmalloc'] as const;

const args = benchArgs(3, {
  models: { type: 'string' },
  steps: { type: 'string' },
  rounds: { type: 'string' },
  threads: { type: 'string' },
  configs: { type: 'string' },
  python: { type: 'string' },
  script: { type: 'string' },
});
const checks = optionChecks('torch', args);
// Annotated: a call narrows what follows only through a name declared with its type.
const fail: (message: string) => never = checks.fail;
const models = checks.list('models', 'one or more model names, comma-separated (see --help)') ?? ['cnn', 'lstm', 'encoder'];
const steps = positiveInteger('steps', args.values.steps ?? (args.quick ? '10' : '40'));
// Rounds are the bench's repetitions: --reps, as every bench calls them (--rounds: the same, its older name).
const rounds = args.values.rounds !== undefined ? positiveInteger('rounds', args.values.rounds) : args.values.reps !== undefined ? args.reps : args.quick ? 1 : 3;
const threads = positiveInteger('threads', args.values.threads ?? '2');
const script = path.resolve(String(args.values.script ?? path.join(__dirname, 'torch', 'steps.py')));
const cli = path.resolve(__dirname, '../dist/cli/main.js');

function positiveInteger(name: string, value: string | boolean): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) fail(`--${name} must be a positive integer, got ${String(value)}`);
  return n;
}

const configs = checks.names('configs', CONFIGS);
if (!fs.existsSync(script)) fail(`no such script: ${script}`);

/** The first python that imports torch: --python, else python3 on PATH, else the system's. */
function findPython(): string {
  const candidates = args.values.python ? [String(args.values.python)] : ['python3', '/usr/bin/python3'];
  for (const python of candidates) {
    if (spawnSync(python, ['-c', 'import torch'], { stdio: 'ignore' }).status === 0) return python;
  }
  fail(`no python with torch among ${candidates.join(', ')} (apt-get install python3-torch, or --python PATH)`);
}
const python = findPython();

/**
 * The BLAS torch's figures run on: the BLAS, LAPACK, MKL or BLIS libraries mapped into a python that has run
 * a matrix product (their real files, so Debian's libblas.so.3 alternative shows what it points to), and
 * torch's build configuration. Debian's python3-torch uses the reference BLAS (its sgemm ~22x slower than
 * OpenBLAS's) unless libopenblas0 is installed.
 */
function blasInUse(): { libraries: string[]; kind: string; build: string } {
  const probe = [
    'import json, os, torch',
    'a = torch.ones(64, 64); (a @ a).sum()',
    'libs = sorted({os.path.realpath(f[5]) for f in (l.split() for l in open("/proc/self/maps")) if len(f) >= 6',
    '  and any(k in os.path.basename(f[5]).lower() for k in ("blas", "lapack", "mkl", "blis", "atlas"))})',
    'build = [l.strip() for l in torch.__config__.show().split("\\n") if "BLAS_INFO" in l]',
    'print(json.dumps({"libraries": libs, "build": " ".join(build)}))',
  ].join('\n');
  const run = spawnSync(python, ['-c', probe], { env: cleanEnv(), encoding: 'utf8' });
  if (run.status !== 0) return { libraries: [], kind: `unknown (the probe failed: ${run.stderr.trim().split('\n').pop()})`, build: '' };
  const { libraries, build } = JSON.parse(run.stdout.trim().split('\n').pop()!) as { libraries: string[]; build: string };
  return { libraries, kind: blasKind(libraries), build };
}

/** Which BLAS a list of mapped libraries is, by their paths (Debian's OpenBLAS is openblas-pthread/libblas.so.3). */
function blasKind(libraries: string[]): string {
  const names = libraries.map((l) => l.toLowerCase());
  if (names.some((n) => n.includes('mkl'))) return 'Intel MKL';
  if (names.some((n) => n.includes('openblas'))) return 'OpenBLAS';
  if (names.some((n) => n.includes('blis'))) return 'BLIS';
  if (names.some((n) => n.includes('atlas'))) return 'ATLAS';
  if (libraries.some((l) => /\/blas\/libblas\.so/.test(l))) return 'the reference BLAS (netlib; slow: apt-get install libopenblas0 for OpenBLAS)';
  return libraries.length ? 'another BLAS' : 'none mapped (torch built with its own, or none)';
}

interface StepReport {
  steps: number;
  msPerStep: number[];
  faultsPerStep: number[];
  maxRssKiB: number;
  checksum: string;
}

const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-torch-bench-'));

/** This process's environment without a preloaded allocator or tensorpool's settings: every run, the
 *  recording included, starts from it. */
function cleanEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const name of ['LD_PRELOAD', 'TENSORPOOL_PLAN', 'TENSORPOOL_RECORD', 'TENSORPOOL_ADAPTIVE', 'TENSORPOOL_MIN_BYTES', 'TENSORPOOL_WITH']) delete env[name];
  return env;
}

function workloadOf(model: string): string[] {
  return [python, script, model, String(steps), String(threads)];
}

/** How a configuration runs the workload: the command and the environment (or why it cannot run). */
function command(config: ConfigName, model: string, plan: string | undefined): { argv: string[]; env: NodeJS.ProcessEnv } | string {
  const env = cleanEnv();
  const workload = workloadOf(model);
  if (config === 'glibc') return { argv: workload, env };
  if ((PEERS as readonly string[]).includes(config)) {
    const spec = resolveAllocator(config as (typeof PEERS)[number]);
    if (!spec.library) return `${spec.soname} is not installed (bench/install-peers.sh)`;
    return { argv: workload, env: { ...env, LD_PRELOAD: spec.library } };
  }
  if (!fs.existsSync(preloadLibrary)) return `the preload library is not built (${preloadLibrary})`;
  const withJemalloc = config.endsWith('-jemalloc') ? ['--with', 'jemalloc'] : [];
  if (withJemalloc.length) {
    const jemalloc = resolveAllocator('jemalloc');
    if (!jemalloc.library) return `${jemalloc.soname} is not installed (bench/install-peers.sh)`;
  }
  if (config === 'tensorpool-run' || config === 'tensorpool-run-jemalloc') return { argv: [process.execPath, cli, 'run', ...withJemalloc, '--', ...workload], env };
  if (!plan) return 'no plan (its recording failed)';
  return { argv: [process.execPath, cli, 'run', '--plan', plan, ...withJemalloc, '--', ...workload], env };
}

function runWorkload(argv: string[], env: NodeJS.ProcessEnv): StepReport {
  const r = spawnSync(argv[0], argv.slice(1), { env, encoding: 'utf8', maxBuffer: 64 << 20 });
  const last = r.stdout?.trim().split('\n').pop() ?? '';
  if (r.status !== 0) throw new Error(`exit ${r.status}: ${(r.stderr ?? '').trim().split('\n').slice(-2).join(' ')}`);
  try {
    const report = JSON.parse(last) as StepReport;
    if (!Array.isArray(report.msPerStep) || !Array.isArray(report.faultsPerStep)) throw new Error('no msPerStep / faultsPerStep');
    return report;
  } catch (e) {
    throw new Error(`the workload's last line is not its JSON report (${(e as Error).message}): ${last.slice(0, 120)}`);
  }
}

/** The plan for tensorpool-run-planned: a run of the same workload recorded, then trained. */
function planFor(model: string): string | undefined {
  const recording = path.join(scratch, `${model}.csv`);
  const plan = path.join(scratch, `${model}.plan.json`);
  try {
    runWorkload([process.execPath, cli, 'run', '--record', recording, '--', ...workloadOf(model)], cleanEnv());
    train(readTrace(recording), { order: 'auto' }).write(plan);
    return plan;
  } catch (e) {
    console.error(`# ${model}: recording for tensorpool-run-planned failed: ${(e as Error).message}`);
    return undefined;
  }
}

interface Row {
  config: ConfigName;
  runs: StepReport[];
  error?: string;
}

function steady(values: number[]): number[] {
  return values.slice(Math.floor(values.length / 2));
}

function main(): void {
  printHeader(`PyTorch under each process allocator (torch steps of ${path.basename(script)}, ${threads} threads)`);
  const blas = blasInUse();
  console.log(`# BLAS: ${blas.kind}${blas.libraries.length ? ` (${blas.libraries.join(', ')})` : ''}${blas.build ? `; torch built with ${blas.build}` : ''}`);
  const results = [];
  for (const model of models) {
    const plan = configs.some((c) => c.startsWith('tensorpool-run-planned')) ? planFor(model) : undefined;
    const rows: Row[] = configs.map((config) => ({ config, runs: [] }));
    for (let round = 0; round < rounds; round++) {
      for (const row of rows) {
        if (row.error) continue;
        const how = command(row.config, model, plan);
        if (typeof how === 'string') {
          row.error = how;
          continue;
        }
        console.error(`# ${model}: round ${round + 1}/${rounds}, ${row.config}`);
        try {
          row.runs.push(runWorkload(how.argv, how.env));
        } catch (e) {
          row.error = (e as Error).message;
        }
      }
    }
    const summary = rows.map((row) => {
      if (row.error || row.runs.length === 0) return { config: row.config, error: row.error ?? 'no run' };
      // Each round's own, in order (a median hides a workload whose peak differs from run to run), then pooled.
      const steadyMs = row.runs.map((r) => steady(r.msPerStep));
      const steadyFaults = row.runs.map((r) => steady(r.faultsPerStep));
      const peakRssBytesPerRound = row.runs.map((r) => r.maxRssKiB * 1024);
      const ms = steadyMs.flat();
      return {
        config: row.config,
        steadyMs,
        msPerStep: median(ms),
        meanMsPerStep: ms.reduce((a, b) => a + b, 0) / ms.length,
        p95MsPerStep: quantile([...ms].sort((a, b) => a - b), 0.95),
        faultsPerStep: median(steadyFaults.flat()),
        peakRssBytes: median(peakRssBytesPerRound),
        peakRssBytesPerRound,
        steadyFaults,
        checksums: [...new Set(row.runs.map((r) => r.checksum))],
      };
    });
    const measured = summary.filter((s) => !('error' in s)) as Exclude<(typeof summary)[number], { error: string }>[];
    const peers = measured.filter((s) => s.config === 'glibc' || (PEERS as readonly string[]).includes(s.config));
    const bestPeer = Math.min(...peers.map((s) => s.msPerStep));
    const fastest = peers.find((s) => s.msPerStep === bestPeer);
    // Step k of round r against the fastest peer's step k of round r: processes run one after another.
    const pairedWithFastest = (s: (typeof measured)[number]) =>
      fastest && s.steadyMs.length === fastest.steadyMs.length && s.steadyMs.every((m, r) => m.length === fastest.steadyMs[r].length)
        ? medianInterval(pairedRatios(s.steadyMs.flat(), fastest.steadyMs.flat()))
        : null;
    const pairedOf = new Map(measured.map((s) => [s.config, pairedWithFastest(s)]));
    const pairedCell = (config: ConfigName) => {
      const paired = pairedOf.get(config);
      return paired ? formatInterval(paired, 3) : null;
    };
    const glibc = measured.find((s) => s.config === 'glibc');
    console.log(`\n## ${model} (${steps} steps per process, the last ${steps - Math.floor(steps / 2)} measured, ${rounds} round(s))`);
    console.log(
      formatTable(
        ['configuration', 'ms/step', 'mean', 'p95', 'x best peer', 'paired (95% CI)', 'faults/step', 'peak RSS', 'result = glibc'],
        summary.map((s) =>
          'error' in s
            ? [s.config, s.error ?? '', null, null, null, null, null, null, null]
            : [
                s.config,
                round(s.msPerStep, 1),
                round(s.meanMsPerStep, 1),
                round(s.p95MsPerStep, 1),
                peers.length ? round(s.msPerStep / bestPeer, 3) : null,
                pairedCell(s.config),
                round(s.faultsPerStep, 0),
                s.peakRssBytesPerRound.length > 1
                  ? `${formatBytes(s.peakRssBytes)} (${formatBytes(Math.min(...s.peakRssBytesPerRound))}-${formatBytes(Math.max(...s.peakRssBytesPerRound))})`
                  : formatBytes(s.peakRssBytes),
                !glibc ? '–' : s.checksums.length === 1 && glibc.checksums.length === 1 && s.checksums[0] === glibc.checksums[0] ? 'yes' : 'no',
              ],
        ),
      ),
    );
    results.push({
      model,
      steps,
      rounds,
      threads,
      fastestPeer: fastest?.config ?? null,
      results: summary.map((s) => ('error' in s ? s : { ...s, pairedWithFastestPeer: pairedOf.get(s.config) })),
    });
  }
  console.log('# ms/step: the median step (mean: where steps differ in shape, as encoder\'s do, the mean weighs every shape); x best peer: the');
  console.log('# median over the fastest median of glibc, jemalloc, mimalloc and tcmalloc in this run; paired: each steady step over that');
  console.log("# peer's step of the same round and number, the median ratio and its 95% distribution-free interval; peak RSS: the median");
  console.log('# process\'s, and the lowest and highest of the rounds\' (the JSON has each round\'s)');
  fs.rmSync(scratch, { recursive: true, force: true });
  writeJson(args.json, { script, python, blas, results });
}

main();

/**
 * The Node hook's per-run work (issue 54): what marking an iteration and the young-generation collection
 * (lib/hooks/node.ts, lib/collect.ts) cost each session.run() of short runs. The workload is greedy
 * generation with a GPT-like decoder built here (bench/decoder-model.ts: 4 layers of width 512, vocabulary
 * 8192, a key/value cache fed back each run; random weights) by bench/node-hook-app.cjs: a prompt of 8
 * tokens, then one token a run, --tokens runs a generation, ONNX Runtime on one thread (intra- and inter-op
 * threads 1: no spin-waits), about 5 ms of CPU a run on a 2-vCPU VM. Configurations:
 *
 *   arena                plain node, ONNX Runtime's arena and memory pattern on (its defaults)
 *   glibc                plain node, the app turns the arena and memory pattern off (the C library serves)
 *   tensorpool           `tensorpool run -- node app.cjs`: the hook as shipped (arena and memory pattern off,
 *                        each run marks an iteration and collects young garbage where ArrayBuffers grew)
 *   tensorpool-marks     the same with TENSORPOOL_COLLECT_AFTER=off: marks, no collection
 *   tensorpool-no-hooks  `tensorpool run --no-hooks`, the app turning the arena and memory pattern off itself:
 *                        the pool serves ONNX Runtime as under the hook, with no per-run work
 *
 * Instructions are counted by valgrind: a count the machine's load does not move. The hook's work is what
 * callgrind counts inside the functions it calls, on the hollow decoder (hollowDecoderModel: the decoder's
 * inputs and outputs, the same sizes a run, almost none of its compute) over --hollow-generations generations
 * (and the unmeasured one), under tensorpool and tensorpool-marks: the addon's markIteration (inclusive), V8's
 * heap statistics and node's memoryUsage (collectIfGrown's reads), and the garbage collections: all of V8's
 * under tensorpool minus all of V8's under tensorpool-marks (the hook's gc() calls and what they change in
 * V8's own), divided by the runs. The hook's JavaScript around those calls (JIT code, which callgrind cannot
 * name) is not in it. Whole-process differences between configurations are not the measure: the counts of JIT
 * code and of V8's background threads move between processes by more than the hook's work. A run's instructions on the decoder
 * itself (the share's denominator; --full-configs, default tensorpool) are cachegrind's (`--cache-sim=no`, every
 * thread) (I(B generations) - I(A generations)) / ((B - A) x --tokens), --counted A,B: start-up, loading the
 * model and exit cancel out. Under valgrind the pool's decay is off (TENSORPOOL_DECAY_MS=off): it is driven by
 * milliseconds, which valgrind stretches.
 *
 * CPU time (process.cpuUsage, user + system, the decoder over --generations generations outside valgrind) is
 * context only on a shared machine. Configurations run interleaved within a round; ratios and shares are
 * paired by round: median [95% interval]. Every configuration must generate the same tokens (a checksum).
 *
 *   npm run build && npx tsx bench/node-hook.ts [--rounds 3] [--configs LIST] [--full-configs LIST]
 *       [--tokens 32] [--generations 20] [--counted 1,3] [--hollow-generations 12] [--no-instructions]
 *       [--json out.json]
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { runEnvironment } from '../dist/cli/run.js';
import { median, medianInterval, pairedRatios, type MedianInterval } from '../dist/report/stats.js';
import { formatInterval, formatTable, round } from '../dist/report/table.js';
import { DECODER, decoderModel, hollowDecoderModel } from './decoder-model.js';
import { benchArgs, cachegrindInstructions, optionChecks, printHeader, writeJson } from './harness.js';

const CONFIGS = ['arena', 'glibc', 'tensorpool', 'tensorpool-marks', 'tensorpool-no-hooks'] as const;
type ConfigName = (typeof CONFIGS)[number];

const args = benchArgs(1, {
  rounds: { type: 'string' },
  configs: { type: 'string' },
  'full-configs': { type: 'string' },
  tokens: { type: 'string' },
  generations: { type: 'string' },
  counted: { type: 'string' },
  'hollow-generations': { type: 'string' },
  'no-instructions': { type: 'boolean' },
});
const checks = optionChecks('node-hook', args);
const fail: (message: string) => never = checks.fail;
const rounds = checks.integer('rounds', args.quick ? 1 : 3);
const tokens = checks.integer('tokens', 32, 2);
const generations = checks.integer('generations', args.quick ? 4 : 20);
const hollowGenerations = checks.integer('hollow-generations', args.quick ? 2 : 12);
function generationPair(name: string, fallback: string): [number, number] {
  const pair = String(args.values[name] ?? fallback).split(',').map(Number);
  if (pair.length !== 2 || !pair.every(Number.isSafeInteger) || pair[0] < 0 || pair[1] <= pair[0]) fail(`--${name} takes A,B generations with 0 <= A < B, got ${String(args.values[name])}`);
  return [pair[0], pair[1]];
}
const counted = generationPair('counted', '1,3');
const configs = checks.names('configs', CONFIGS);
const fullConfigs = checks.names('full-configs', CONFIGS, ['tensorpool']);
const instructions = !args.values['no-instructions'];

const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-node-hook-bench-'));
const MODELS = { decoder: path.join(scratch, 'decoder.onnx'), hollow: path.join(scratch, 'hollow-decoder.onnx') };
type ModelName = keyof typeof MODELS;
const app = path.join(__dirname, 'node-hook-app.cjs');

/**
 * The environment of `config`'s app: the caller's without any tensorpool, preload or Node option, then the
 * configuration's. `underValgrind`: the pool's decay off, which is driven by milliseconds, so
 * that valgrind's slowing every run down many times would have it give back and fault in again memory that
 * the same runs keep at their native speed; decay is the pool's, not the hook's, work.
 */
function environment(config: ConfigName, model: ModelName, generationCount: number, underValgrind: boolean): NodeJS.ProcessEnv {
  const base: NodeJS.ProcessEnv = {
    ...process.env,
    DECODER_MODEL: MODELS[model],
    DECODER_WIDTH: String(DECODER.width),
    DECODER_TOKENS: String(tokens),
    DECODER_GENERATIONS: String(generationCount),
  };
  for (const key of ['LD_PRELOAD', 'NODE_OPTIONS', 'DECODER_ARENA']) delete base[key];
  for (const key of Object.keys(base)) if (key.startsWith('TENSORPOOL_')) delete base[key];
  const decay: Record<string, string> = underValgrind ? { TENSORPOOL_DECAY_MS: 'off' } : {};
  switch (config) {
    case 'arena':
      return base;
    case 'glibc':
      return { ...base, DECODER_ARENA: '0' };
    case 'tensorpool':
      return runEnvironment(base, decay);
    case 'tensorpool-marks':
      return runEnvironment(base, { ...decay, TENSORPOOL_COLLECT_AFTER: 'off' });
    case 'tensorpool-no-hooks':
      return { ...runEnvironment(base, decay, false), DECODER_ARENA: '0' };
  }
}

/** Runs `argv` to its end; resolves with its stdout and stderr, rejects where it failed. */
function finish(argv: string[], env: NodeJS.ProcessEnv): Promise<{ stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(argv[0], argv.slice(1), { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('error', reject);
    child.on('close', (code, signal) => {
      if (code === 0) resolve({ stdout, stderr });
      else reject(new Error(`${argv.slice(0, 4).join(' ')} exited (${code ?? signal}): ${stderr.trim().split('\n').slice(-3).join(' | ')}`));
    });
  });
}

/** CPU time per run of `config` on the decoder outside valgrind (context), and the checksum of its tokens. */
async function cpuPerRun(config: ConfigName): Promise<{ micros: number; checksum: number }> {
  const { stdout } = await finish([process.execPath, app], environment(config, 'decoder', generations, false));
  const line = stdout.split('\n').find((l) => l.startsWith('{'));
  if (!line) throw new Error(`the app printed no result: ${stdout.trim().slice(0, 200)}`);
  const result = JSON.parse(line) as { runs: number; cpuMicros: number; checksum: number };
  return { micros: result.cpuMicros / result.runs, checksum: result.checksum };
}

/** Instructions cachegrind counts for `config`'s app on `model` over `generationCount` measured generations (every thread). */
async function countInstructions(config: ConfigName, model: ModelName, generationCount: number): Promise<number> {
  const valgrind = ['nice', '-n', '10', 'valgrind', '--tool=cachegrind', '--cache-sim=no', '--cachegrind-out-file=/dev/null'];
  const { stderr } = await finish([...valgrind, process.execPath, app], environment(config, model, generationCount, true));
  const instructions = cachegrindInstructions(stderr);
  if (instructions === null) throw new Error(`cachegrind printed no count for ${config}: ${stderr.trim().split('\n').slice(-2).join(' | ')}`);
  return instructions;
}

/** Instructions a run of `config` on `model`: the difference of two counts over `pair` generations. */
async function instructionsPerRun(config: ConfigName, model: ModelName, pair: [number, number]): Promise<number> {
  const [a, b] = await Promise.all(pair.map((g) => countInstructions(config, model, g)));
  return (b - a) / ((pair[1] - pair[0]) * tokens);
}

/** The functions the hook's per-run work runs in, as callgrind_annotate names them (inclusive counts). */
const HOOK_FUNCTIONS = {
  marks: /ProcessPoolObject::MarkIteration>/, // the addon's markIteration, its N-API callback
  heapStatistics: /node::v8_utils::UpdateHeapStatisticsBuffer\(/, // v8.getHeapStatistics()
  memoryUsage: /node::MemoryUsage\(/, // process.memoryUsage()
  hookCollections: /v8::internal::GCExtension::GC\(/, // gc(), which only the hook calls here
  collections: /v8::internal::Heap::CollectGarbage\(/, // every garbage collection of V8's
};
type HookFunction = keyof typeof HOOK_FUNCTIONS;

/** Instructions callgrind counts inside HOOK_FUNCTIONS (inclusive, a run) for `config` on the hollow decoder. */
async function hookFunctionsPerRun(config: ConfigName): Promise<Record<HookFunction, number>> {
  const out = path.join(scratch, `callgrind-${config}.out`);
  const valgrind = ['nice', '-n', '10', 'valgrind', '--tool=callgrind', `--callgrind-out-file=${out}`];
  await finish([...valgrind, process.execPath, app], environment(config, 'hollow', hollowGenerations, true));
  const { stdout } = await finish(['callgrind_annotate', '--inclusive=yes', '--threshold=100', out], process.env);
  const runs = (hollowGenerations + 1) * tokens; // with the unmeasured generation: the hook works in its runs too
  const counts = {} as Record<HookFunction, number>;
  for (const [name, pattern] of Object.entries(HOOK_FUNCTIONS) as [HookFunction, RegExp][]) {
    // A function's inclusive count is on the line of its own symbol; lines of code inlined into it are less.
    let most = 0;
    for (const line of stdout.split('\n')) {
      const m = /^\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(?!=>)(.*)$/.exec(line);
      if (m && pattern.test(m[2])) most = Math.max(most, Number(m[1].replace(/,/g, '')));
    }
    counts[name] = most / runs;
  }
  return counts;
}

interface Sample {
  cpuMicros: number;
  checksum: number;
}

const count = (n: number) => Math.round(n).toLocaleString('en-US');

async function main(): Promise<void> {
  const machine = printHeader('the Node hook\'s per-run work: a GPT-like decoder, one session.run() a token, ONNX Runtime on one thread');
  fs.writeFileSync(MODELS.decoder, decoderModel());
  fs.writeFileSync(MODELS.hollow, hollowDecoderModel());
  console.log(`# decoder: ${DECODER.layers} layers, width ${DECODER.width}, vocabulary ${DECODER.vocabulary}; ${tokens} runs a generation; CPU over ${generations} generations; ${rounds} round(s)`);
  if (instructions) console.log(`# instructions: callgrind in the hook's functions, hollow decoder, ${hollowGenerations} generations; cachegrind, decoder (I(${counted[1]}) - I(${counted[0]})) generations for ${fullConfigs.join(', ')}`);
  // The valgrind runs are slow (the decoder's hours of valgrind time against seconds natively): they start at
  // once, beside the CPU rounds, which are context only.
  const counting = instructions
    ? Promise.all([
        Promise.all((['tensorpool', 'tensorpool-marks'] as const).map((config) => hookFunctionsPerRun(config))),
        Promise.all(fullConfigs.map((config) => instructionsPerRun(config, 'decoder', counted))),
      ])
    : null;
  const samples = new Map<ConfigName, Sample[]>(configs.map((c) => [c, []]));
  for (let r = 0; r < rounds; r++) {
    // The round's order turns, so that no configuration always runs first.
    const order = configs.map((_, i) => configs[(i + r) % configs.length]);
    for (const config of order) {
      const { micros, checksum } = await cpuPerRun(config);
      samples.get(config)!.push({ cpuMicros: micros, checksum });
      console.log(`# round ${r + 1} ${config}: decoder ${micros.toFixed(0)} us CPU a run`);
    }
  }
  const counts = counting ? await counting : null;
  const full = new Map<ConfigName, number>(counts ? fullConfigs.map((config, i) => [config, counts[1][i]]) : []);
  for (const [config, perRun] of full) console.log(`# decoder ${config}: ${count(perRun)} instructions a run (cachegrind)`);

  const reference = samples.get(configs[0])![0].checksum;
  const series = (config: ConfigName, pick: (s: Sample) => number | null): number[] | null => {
    const values = samples.get(config)?.map(pick);
    return values && values.every((v) => v !== null) ? (values as number[]) : null;
  };
  const vsArena = (config: ConfigName, pick: (s: Sample) => number | null): MedianInterval | null => {
    const [x, y] = [series(config, pick), series('arena', pick)];
    return x && y ? medianInterval(pairedRatios(x, y)) : null;
  };
  const results = configs.map((config) => ({
    config,
    cpuMicros: median(series(config, (s) => s.cpuMicros)!),
    cpuVsArena: vsArena(config, (s) => s.cpuMicros),
    decoder: full.get(config) ?? null,
    sameTokens: samples.get(config)!.every((s) => s.checksum === reference),
  }));
  console.log(formatTable(
    ['configuration', 'decoder: instructions a run', 'decoder: CPU us a run', 'vs arena', 'tokens'],
    results.map((r) => [
      r.config,
      r.decoder === null ? '' : count(r.decoder),
      round(r.cpuMicros, 0),
      r.cpuVsArena ? formatInterval(r.cpuVsArena, 3) : '',
      r.sameTokens ? 'same' : 'DIFFER',
    ]),
  ));
  // The hook's work a run, by what it runs, and its share of a decoder run under tensorpool.
  let hook = null;
  const decoderRun = full.get('tensorpool');
  if (counts && decoderRun !== undefined) {
    const [withCollection, marksOnly] = counts[0];
    const work = {
      marks: withCollection.marks,
      reads: withCollection.heapStatistics + withCollection.memoryUsage,
      collection: withCollection.collections - marksOnly.collections,
    };
    const all = work.marks + work.reads + work.collection;
    hook = { perRun: { ...work, all }, share: all / decoderRun, functions: { tensorpool: withCollection, 'tensorpool-marks': marksOnly } };
    const part = (n: number) => `${count(n)} (${((100 * n) / decoderRun).toFixed(2)} %)`;
    console.log(`# the hook's per-run work, instructions a run (share of a decoder run under tensorpool, ${count(decoderRun)}): all ${part(all)}; marks ${part(work.marks)}; heap statistics and memoryUsage ${part(work.reads)}; collection ${part(work.collection)} (gc() itself ${count(withCollection.hookCollections)}; V8's collections ${count(withCollection.collections)} a run with the hook's, ${count(marksOnly.collections)} without)`);
  }
  // CPU time (context): (tensorpool - tensorpool-no-hooks) / tensorpool, paired by round.
  const [withHook, noHooks] = [series('tensorpool', (s) => s.cpuMicros), series('tensorpool-no-hooks', (s) => s.cpuMicros)];
  const cpuShare = withHook && noHooks ? medianInterval(withHook.map((v, r) => (v - noHooks[r]) / v)) : null;
  if (cpuShare) console.log(`# CPU time (context): (tensorpool - tensorpool-no-hooks) / tensorpool ${formatInterval({ ...cpuShare, median: 100 * cpuShare.median, low: 100 * cpuShare.low, high: 100 * cpuShare.high }, 2)} %`);
  console.log('# medians over rounds; ratios and shares paired by round: median [95% interval]; instructions: cachegrind, every thread; CPU: process.cpuUsage, context only on a shared machine');
  writeJson(args.json, { machine, decoder: DECODER, tokens, generations, counted, hollowGenerations, rounds, results, hook, cpuShare, samples: Object.fromEntries(samples), decoderInstructions: Object.fromEntries(full) });
}

main()
  .catch((error) => {
    console.error(error);
    process.exitCode = 1;
  })
  .finally(() => fs.rmSync(scratch, { recursive: true, force: true }));

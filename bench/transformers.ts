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
 * Rounds, figures and checks as every bench of an unchanged app (bench/app-bench.ts): peak RSS, ms and
 * faults per run and their ratios to the arena's, growth, the pool's iterations against the app's session
 * runs, outputs compared bit for bit.
 *
 *   npm run build && npx tsx bench/transformers.ts --transformers DIR [--runs 200] [--warmup 20]
 *       [--rounds 6] [--configs arena,tensorpool] [--seed 7] [--json out.json]   (--quick: 40 runs, 2 rounds)
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { APP_BENCH_OPTIONS, PEERS, appBenchSettings, runAppBench } from './app-bench.js';
import { benchArgs, printHeader } from './harness.js';
import { writeTextEncoder } from './transformers-model.js';

const CONFIGS = ['arena', 'tensorpool', 'tensorpool-adaptive', 'tensorpool-decay-off', ...PEERS] as const;
/** The configurations under `tensorpool run`, and its options. */
const RUN_OPTIONS: Record<string, string[]> = { tensorpool: [], 'tensorpool-adaptive': ['--adaptive'], 'tensorpool-decay-off': ['--decay', 'off'] };
const INSTALL = 'npm install --ignore-scripts --prefix DIR @huggingface/transformers@4';

const args = benchArgs(1, { ...APP_BENCH_OPTIONS, transformers: { type: 'string' } });
const settings = appBenchSettings('transformers', args, CONFIGS, { runs: 200, quickRuns: 40, warmup: (runs) => Math.floor(runs / 10), timeoutSeconds: 120 });
const { runs, warmup, rounds, seed } = settings;
// Annotated: a call narrows what follows only through a name declared with its type.
const fail: (message: string) => never = settings.fail;
const transformersDir = args.values.transformers === undefined ? fail(`--transformers DIR is needed: a directory where @huggingface/transformers is installed (${INSTALL})`) : path.resolve(String(args.values.transformers));
if (!fs.existsSync(path.join(transformersDir, 'node_modules/@huggingface/transformers/package.json'))) {
  fail(`no @huggingface/transformers in ${transformersDir}/node_modules: install it with ${INSTALL.replace('DIR', transformersDir)}`);
}

const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-transformers-bench-'));

async function main(): Promise<void> {
  const machine = printHeader('transformers.js feature-extraction pipelines, unchanged, under each configuration');
  const version = JSON.parse(fs.readFileSync(path.join(transformersDir, 'node_modules/@huggingface/transformers/package.json'), 'utf8')).version as string;
  const ortPackage = path.join(transformersDir, 'node_modules/onnxruntime-node/package.json');
  const ortVersion = fs.existsSync(ortPackage) ? (JSON.parse(fs.readFileSync(ortPackage, 'utf8')).version as string) : '?';
  writeTextEncoder(scratch, 'text-encoder');
  console.log(`# @huggingface/transformers ${version} (onnxruntime-node ${ortVersion}) in ${transformersDir}; ${runs} runs (${warmup} warm up) x ${rounds} rounds, seed ${seed}`);
  await runAppBench({
    name: 'transformers',
    app: path.join(__dirname, 'transformers-app.mjs'),
    env: { TRANSFORMERS_DIR: transformersDir, TRANSFORMERS_MODELS: scratch, TRANSFORMERS_MODEL: 'text-encoder', APP_SEED: String(seed) },
    ...settings,
    runOptions: RUN_OPTIONS,
    machine,
    json: { file: args.json, extra: { transformers: version, onnxruntimeNode: ortVersion, seed } },
  });
}

main()
  .catch((error) => {
    console.error(error);
    process.exitCode = 1;
  })
  .finally(() => fs.rmSync(scratch, { recursive: true, force: true }));

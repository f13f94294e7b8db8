// A feature-extraction pipeline of @huggingface/transformers as users write one, knowing nothing of
// tensorpool (bench/transformers.ts runs it under each configuration): `import { pipeline, env }`, a local
// model only (env.allowRemoteModels = false), then texts of random lengths in batches of random sizes
// (seeded: the same sequence in every configuration), mean-pooled and normalised. Environment:
//   TRANSFORMERS_DIR     where @huggingface/transformers is installed (DIR/node_modules/@huggingface/transformers)
//   TRANSFORMERS_MODELS  the directory holding the model's directory; TRANSFORMERS_MODEL its name
//   APP_RUNS             pipeline calls (default 200); APP_WARMUP the first ones left out of the
//                        per-run figures (default a tenth); APP_SEED the texts' seed (default 7)
// Prints one JSON line at the end (bench/app-bench.ts reads it): its pid, its session runs, the RSS and peak
// RSS (VmHWM) once the pipeline was made, then at the end; RSS, minor page faults and time at the end of the
// warm-up and at the end; and a SHA-256 of every output's bytes, so that configurations can be compared bit
// for bit.
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

import { snapshot } from './app-snapshot.mjs';

const dir = process.env.TRANSFORMERS_DIR;
const runs = Number(process.env.APP_RUNS || 200);
const warmup = Number(process.env.APP_WARMUP || Math.floor(runs / 10));
let seed = Number(process.env.APP_SEED || 7);

// The package's Node ESM build, as `import ... from '@huggingface/transformers'` in an app inside DIR finds
// it: this file lives elsewhere, where a bare import would not see DIR's node_modules.
const packageDir = path.join(dir, 'node_modules/@huggingface/transformers');
const { exports: entries } = JSON.parse(fs.readFileSync(path.join(packageDir, 'package.json'), 'utf8'));
const entry = entries?.node?.import?.default ?? entries?.node?.import;
if (typeof entry !== 'string') throw new Error(`${packageDir}/package.json names no Node ESM entry (exports.node.import)`);
const { pipeline, env } = await import(pathToFileURL(path.join(packageDir, entry)).href);

env.allowRemoteModels = false;
env.localModelPath = process.env.TRANSFORMERS_MODELS;

const extractor = await pipeline('feature-extraction', process.env.TRANSFORMERS_MODEL, { dtype: 'fp32', device: 'cpu' });
const ready = snapshot();

const words = 'the quick brown fox jumps over a lazy dog while tensors of every shape come and go in memory pages'.split(' ');
const random = () => (seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) / 2 ** 32;
const pick = (list) => list[Math.floor(random() * list.length)];
const text = (length) => Array.from({ length }, () => pick(words)).join(' ');

const hash = createHash('sha256');
let warm = ready;
for (let i = 0; i < runs; i++) {
  if (i === warmup) warm = snapshot();
  const batch = pick([1, 2, 4, 8]);
  const length = pick([8, 32, 64, 128, 200]);
  const output = await extractor(Array.from({ length: batch }, () => text(length)), { pooling: 'mean', normalize: true });
  hash.update(new Uint8Array(output.data.buffer, output.data.byteOffset, output.data.byteLength));
}
const end = snapshot();
// One session.run() per pipeline call (feature extraction runs the model once).
console.log(JSON.stringify({ pid: process.pid, runs, warmup, sessionRuns: runs, ready, warm, end, outputs: hash.digest('hex') }));

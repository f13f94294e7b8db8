// A program to run under `tensorpool run` (run.sh; from the repository's root: sh examples/process/run.sh):
// an onnxruntime-node session on a cycle of input shapes, written as if tensorpool did not exist. Under
// `tensorpool run` its hooks turn ONNX Runtime's arena off, so that the session's tensors come from malloc,
// which the process pool serves, and mark each run as an iteration of the pool. Nothing here names tensorpool.
import { fileURLToPath } from 'node:url';
import ort from 'onnxruntime-node';

const model = fileURLToPath(new URL('../model.onnx', import.meta.url));
const shapes = [[1, 3, 224, 224], [1, 3, 160, 320], [2, 3, 128, 128]];
const session = await ort.InferenceSession.create(model, { intraOpNumThreads: 2 });

async function infer(dims) {
  const x = new ort.Tensor('float32', new Float32Array(dims.reduce((a, b) => a * b)).fill(0.5), dims);
  const { y } = await session.run({ x });
  return Array.from(y.data);
}

for (let c = 0; c < 2; c++) for (const dims of shapes) await infer(dims); // warm-up: two cycles
const runs = 5 * shapes.length;
const before = process.resourceUsage().minorPageFault;
let scores = [];
for (let i = 0; i < runs; i++) scores = await infer(shapes[i % shapes.length]);
const perRun = (process.resourceUsage().minorPageFault - before) / runs;
console.log(`${perRun.toFixed(1)} page faults per run`);
console.log(`last scores: ${scores.slice(0, 3).map((v) => v.toFixed(4)).join(' ')}`);

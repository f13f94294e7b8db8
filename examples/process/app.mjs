// A program to run under `tensorpool run` (run.sh; from the repository's root: sh examples/process/run.sh):
// an onnxruntime-node session on a cycle of input shapes, ONNX Runtime's own arena off, so that its tensors
// come from malloc, which tensorpool serves.
import { fileURLToPath } from 'node:url';
import ort from 'onnxruntime-node';
import { faults, processPool } from 'tensorpool';

const model = fileURLToPath(new URL('../model.onnx', import.meta.url));
const shapes = [[1, 3, 224, 224], [1, 3, 160, 320], [2, 3, 128, 128]];
const session = await ort.InferenceSession.create(model, { enableCpuMemArena: false, enableMemPattern: false, intraOpNumThreads: 2 });
const pool = processPool(); // the process pool under `tensorpool run`; null otherwise

async function infer(dims) {
  pool?.markIteration(); // one iteration per run: what a plan's schedule counts from
  const x = new ort.Tensor('float32', new Float32Array(dims.reduce((a, b) => a * b)).fill(0.5), dims);
  const { y } = await session.run({ x });
  return Array.from(y.data);
}

for (let c = 0; c < 2; c++) for (const dims of shapes) await infer(dims); // warm-up: two cycles
const runs = 5 * shapes.length;
const before = faults();
let scores = [];
for (let i = 0; i < runs; i++) scores = await infer(shapes[i % shapes.length]);
const perRun = (faults().minor - before.minor) / runs;
console.log(`${pool ? `tensorpool run (${pool.mode})` : 'plain node'}: ${perRun.toFixed(1)} page faults per run`);
console.log(`last scores: ${scores.slice(0, 3).map((v) => v.toFixed(4)).join(' ')}`);

// A PooledSession on the process pool, for a program run under `tensorpool run`: ONNX Runtime's arena and
// memory pattern off, so the process pool serves ONNX Runtime's mallocs; the session's inputs and outputs
// come from processPool().alloc(), and every run marks an iteration of the process pool.
// Run: npx tensorpool run --adaptive -- node examples/process/session.mjs
import { fileURLToPath } from 'node:url';
import { faults, processPool } from 'tensorpool';
import { PooledSession } from 'tensorpool/onnxruntime';

const pool = processPool(); // null without `tensorpool run`
if (!pool) {
  console.error('run me under `tensorpool run`: npx tensorpool run --adaptive -- node examples/process/session.mjs');
  process.exit(2);
}
const model = fileURLToPath(new URL('../model.onnx', import.meta.url));
const shapes = [[1, 3, 224, 224], [1, 3, 160, 320], [2, 3, 128, 128]];
const session = await PooledSession.create(pool, model, { sessionOptions: { intraOpNumThreads: 2 } });

async function infer(dims) {
  const x = session.tensor('float32', dims);
  x.data.fill(0.5); // your input here
  const { y } = await session.run({ x });
  const scores = Array.from(y.data);
  session.release(x, y);
  return scores;
}

// Warm up; with --adaptive, until a plan serves and three cycles of shapes ran without a switch (it records,
// trains on a worker thread, then switches; a shape that runs differently the first time makes it re-plan).
const switches = () => pool.stats().switches;
for (let c = 0, quiet = 0; c < 2 || (pool.mode === 'adaptive' && quiet < 3 && c < 60); c++) {
  const before = switches();
  for (const dims of shapes) await infer(dims);
  quiet = pool.stats().adaptive?.mode === 'planned' && switches() === before ? quiet + 1 : 0;
}
const runs = 5 * shapes.length;
const before = faults();
let scores = [];
for (let i = 0; i < runs; i++) scores = await infer(shapes[i % shapes.length]);
console.log(`process pool (${pool.mode}): ${((faults().minor - before.minor) / runs).toFixed(1)} page faults per run`);
console.log(`last scores: ${scores.slice(0, 3).map((v) => v.toFixed(4)).join(' ')}`);
console.log(`adaptive: ${pool.stats().adaptive?.mode ?? 'off'}`);

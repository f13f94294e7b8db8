// An onnxruntime-node service in-process: the session's inputs, outputs and ONNX Runtime's own
// allocations all come from one pool. Run: node examples/onnxruntime-service.mjs
import { fileURLToPath } from 'node:url';
import { Pool, measureFaults } from 'tensorpool';
import { PooledSession } from 'tensorpool/onnxruntime';

const model = fileURLToPath(new URL('./model.onnx', import.meta.url)); // your model's path
const shapes = [[1, 3, 224, 224], [1, 3, 160, 320], [2, 3, 128, 128]]; // the input shapes it serves

const pool = new Pool(); // default classes, grown on demand (or { plan: 'model.plan.json' })
const session = await PooledSession.create(pool, model, { sessionOptions: { intraOpNumThreads: 2 } });

async function infer(dims) {
  const x = session.tensor('float32', dims); // an ort.Tensor over pool memory
  x.data.fill(0.5); // your input here
  const { y } = await session.run({ x }); // marks one iteration of the pool per run
  const scores = Array.from(y.data);
  session.release(x, y); // back to the pool (safe even while a run is in flight)
  return scores;
}

for (const dims of shapes) await infer(dims); // a shape's first run learns its output shape
const runs = 5 * shapes.length;
const { minor, result } = await measureFaults(async () => {
  let scores = [];
  for (let i = 0; i < runs; i++) scores = await infer(shapes[i % shapes.length]);
  return scores;
}, { scope: 'process' });
console.log(`last scores: ${result.slice(0, 3).map((v) => v.toFixed(4)).join(' ')}`);
console.log(`page faults per run: ${(minor / runs).toFixed(1)}`);
const stats = pool.stats();
console.log(`pool: ${stats.allocs} allocations, ${stats.osFallbacks} of them served by the OS`);
await session.session.release();
pool.close();

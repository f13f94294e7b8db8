// The Pool API: a step's tensors come from pre-faulted memory that the next step reuses, where a fresh
// typed array faults in every one of its pages again. Run: node examples/pool.mjs
import { Pool, measureFaults } from 'tensorpool';

const pool = new Pool(); // default size classes, grown on demand (or { plan: 'model.plan.json' })

function step() {
  const x = pool.float32(1 << 20); // a 4 MiB Float32Array over pool memory; uninitialised, like malloc
  const y = pool.float32(1 << 20);
  x.fill(1);
  for (let i = 0; i < y.length; i++) y[i] = 2 * x[i];
  pool.release(x); // the block goes back to the pool and x is detached (x.length is now 0)
  pool.release(y);
}

function plainStep() {
  const x = new Float32Array(1 << 20).fill(1);
  const y = new Float32Array(1 << 20);
  for (let i = 0; i < y.length; i++) y[i] = 2 * x[i];
}

for (let i = 0; i < 3; i++) step(); // the first steps grow the pool
const pooled = measureFaults(() => { for (let i = 0; i < 10; i++) { pool.markIteration(); step(); } });
const plain = measureFaults(() => { for (let i = 0; i < 10; i++) plainStep(); });
console.log(`page faults in 10 steps: pool ${pooled.minor}, new Float32Array ${plain.minor}`);

const stats = pool.stats();
console.log(`pool: ${stats.allocs} allocations, ${stats.hits} served by their own class, ${stats.osFallbacks} by the OS`);
pool.close();

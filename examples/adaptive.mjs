// Adaptive mode: the pool records the first iterations, trains a plan on them in a worker thread and
// switches to it at an iteration mark. Run: node examples/adaptive.mjs
import { Pool } from 'tensorpool';

const pool = new Pool({ adaptive: { onSwitch: (e) => console.log(`plan ${e.generation} serves after iteration ${e.iteration}`) } });
const sizes = [3 << 20, 1 << 20, 512 << 10, 2 << 20];

for (let i = 0; i < 40 && pool.stats().adaptive.mode !== 'planned'; i++) {
  pool.markIteration(); // one training step
  const tensors = sizes.map((bytes) => pool.uint8(bytes).fill(1));
  for (const t of tensors) pool.release(t);
  await pool.adaptiveReady(); // lets training and building the arena finish: the same switch every run
}
console.log(`mode ${pool.stats().adaptive.mode}, arena ${pool.plan.arenaBytes} bytes`);
pool.close();

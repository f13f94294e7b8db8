// A plan for an onnxruntime-node service, trained in-process: record the session's creation and two
// cycles of its input shapes, train, then serve from a pool built from the plan.
// Run: node examples/onnxruntime-plan.mjs
import { fileURLToPath } from 'node:url';
import { Pool, train } from 'tensorpool';
import { PooledSession } from 'tensorpool/onnxruntime';

const model = fileURLToPath(new URL('./model.onnx', import.meta.url));
const shapes = [[1, 3, 224, 224], [1, 3, 160, 320], [2, 3, 128, 128]];

async function infer(session, x) {
  x.data.fill(0.5);
  const { y } = await session.run({ x });
  session.release(x, y);
}

// 1. Record from before the session is created (its weights are allocated then) through two cycles.
const recording = new Pool();
recording.record();
let session = await PooledSession.create(recording, model);
let x = session.tensor('float32', shapes[0]);
for (let c = 0; c < 2; c++) {
  for (let i = 0; i < shapes.length; i++) {
    const next = i + 1 < shapes.length ? shapes[i + 1] : shapes[0];
    const current = x;
    await infer(session, current);
    x = session.tensor('float32', next); // the next run's input is made before the next run marks its iteration
  }
}
const trace = recording.stopRecording('example'); // after the next input is made: the last iteration is whole
session.release(x);
await session.session.release();
recording.close();

// 2. Train: training finds the cycle of shapes and lays it out to repeat.
const plan = train(trace, { order: 'auto' });
console.log(`plan: ${plan.arenaBytes} bytes, ${(plan.arenaBytes / plan.lowerBound).toFixed(3)}x the lower bound`);

// 3. Serve from the plan (plan.write('model.plan.json') keeps it; new Pool({ plan: 'model.plan.json' }) reads it).
const pool = new Pool({ plan });
session = await PooledSession.create(pool, model);
for (let c = 0; c < 4; c++) for (const dims of shapes) await infer(session, session.tensor('float32', dims));
const s = pool.stats();
console.log(`served ${s.allocs} allocations: ${s.scheduleHits} where scheduled, ${s.osFallbacks} from the OS`);
await session.session.release();
pool.close();

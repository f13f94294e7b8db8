// A PooledSession whose app makes each request's input in JS, as preprocessing does (a fresh Float32Array),
// copies it into the session's pooled tensor and drops it (test/onnxruntime.test.ts). argv: model file, runs,
// batch, where the session's tensors come from ('pool': a Pool of its own; 'process': processPool(), under
// `tensorpool run`), options.collectAfter ('unset', 'off' or bytes). Prints one JSON line: the outputs'
// sums, one per run, and the most memory the thread's ArrayBuffers held after a run (the dropped arrays
// V8 has not collected yet).
const { Pool, processPool } = require('../../dist/index.js');
const { PooledSession } = require('../../dist/onnxruntime.js');

(async () => {
  const [model, runs, batch, source, collect] = [process.argv[2], Number(process.argv[3]), Number(process.argv[4]), process.argv[5], process.argv[6]];
  const options = { sessionOptions: { intraOpNumThreads: 1 } };
  if (collect !== 'unset') options.collectAfter = collect === 'off' ? 'off' : Number(collect);
  const pool = source === 'process' ? processPool() : new Pool();
  const session = await PooledSession.create(pool, model, options);
  const dims = [batch, 8, 32, 32];
  const sums = [];
  let buffers = 0;
  for (let i = 0; i < runs; i++) {
    const values = new Float32Array(batch * 8 * 32 * 32);
    for (let k = 0; k < values.length; k++) values[k] = ((k * 7919) % 1009) / 1009 - 0.5;
    const x = session.tensor('float32', dims);
    x.data.set(values);
    const { y } = await session.run({ x });
    sums.push(y.data.reduce((a, b) => a + b, 0));
    session.release(x, y);
    buffers = Math.max(buffers, process.memoryUsage().arrayBuffers);
  }
  await session.close();
  console.log(JSON.stringify({ sums, buffers }));
})().catch((error) => {
  console.error(error);
  process.exit(1);
});

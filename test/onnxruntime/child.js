// Runs inside a process started by `tensorpool run` (test/onnxruntime.test.ts): runs the model file argv[2]
// through a PooledSession whose activations are ONNX Runtime's own (its arena off), so that the process pool
// serves them through malloc; prints one JSON line with the outputs and the process pool's counters. argv[6]
// says where the session's tensors come from: 'pool' (a Pool of their own) or 'process' (processPool()).
const fs = require('node:fs');
const { Pool, processPool, faults } = require('../../dist/index.js');
const { PooledSession } = require('../../dist/onnxruntime.js');

(async () => {
  const [model, batch, runs] = [process.argv[2], Number(process.argv[3]), Number(process.argv[4])];
  const input = new Float32Array(fs.readFileSync(process.argv[5]).buffer.slice(0));
  const whole = process.argv[6] === 'process';
  const out = { outputs: [], faults: [] };
  const session = whole
    ? await PooledSession.create(processPool(), model, { sessionOptions: { intraOpNumThreads: 1 } }) // arena off by default
    : await PooledSession.create(new Pool(), model, {
        activations: 'runtime',
        sessionOptions: { enableCpuMemArena: false, intraOpNumThreads: 1 },
      });
  if (whole) {
    // Served by the pool's arena (its own class, a larger one, or a block carved for it; not the OS): which
    // one depends on what the session's creation left free.
    const fromOs = (s) => s.osFallbacks + s.osOversize;
    const before = processPool().stats();
    const probe = session.tensor('float32', [batch, ...session.session.inputMetadata[0].shape.slice(1)]);
    const after = processPool().stats();
    out.tensorFromOs = fromOs(after) - fromOs(before);
    out.tensorServed = after.allocs - before.allocs - out.tensorFromOs;
    session.release(probe);
    out.errors = [];
    for (const misuse of [() => session.release(probe), () => processPool().release(new ArrayBuffer(8))]) {
      try {
        misuse();
      } catch (error) {
        out.errors.push(error.code);
      }
    }
    await PooledSession.create(processPool(), model, { activations: 'pool' }).catch((error) => out.errors.push(error.code));
  }
  const before = processPool().stats();
  for (let i = 0; i < runs; i++) {
    const x = session.tensor('float32', [batch, ...session.session.inputMetadata[0].shape.slice(1)]);
    x.data.set(input);
    const f0 = faults().minor;
    const y = (await session.run({ x })).y;
    out.faults.push(faults().minor - f0);
    out.outputs.push(Array.from(y.data));
    session.release(x, y);
  }
  const after = processPool().stats();
  out.processAllocs = after.allocs - before.allocs;
  out.processServed = after.hits + after.borrows - before.hits - before.borrows;
  out.processIterations = after.iterations - before.iterations;
  out.poolStats = { osFallbacks: after.osFallbacks, osOversize: after.osOversize };
  await session.close();
  console.log(JSON.stringify(out));
})().catch((error) => {
  console.error(error);
  process.exit(1);
});

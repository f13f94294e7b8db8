// One process of bench/adaptive-process.ts: a single-input float model run over a cycle of input shapes,
// either on ONNX Runtime's own arena ('arena', started without the preload library) or under `tensorpool
// run` with the arena off and a PooledSession on processPool() marking each run ('pool': the bench runs it
// under `tensorpool run --adaptive`). Prints one JSON line: per run its shape, minor page faults, RSS after it, and
// (pool) where adaptive mode stood and what the run took from the OS.
const ort = require('onnxruntime-node');
const { faults, memoryUsage, processPool } = require('../dist/index.js');
const { PooledSession } = require('../dist/onnxruntime.js');

const [model, shapesJson, cyclesText, route] = process.argv.slice(2);
const shapes = JSON.parse(shapesJson);
const cycles = Number(cyclesText);

function fill(array) {
  for (let i = 0; i < array.length; i++) array[i] = ((i * 2654435761) % 4093) / 4093;
}

async function main() {
  const options = { intraOpNumThreads: 2, interOpNumThreads: 1, enableCpuMemArena: route === 'arena' };
  const pool = route === 'pool' ? processPool() : null;
  if (route === 'pool' && !pool) throw new Error('the pool route runs under tensorpool run');
  const session = pool
    ? await PooledSession.create(pool, model, { ort, activations: 'runtime', sessionOptions: { ...options, enableMemPattern: false } })
    : await ort.InferenceSession.create(model, options);
  const input = (pool ? session.session : session).inputNames[0];
  const runs = [];
  for (let c = 0; c < cycles; c++) {
    for (const dims of shapes) {
      const before = pool && pool.stats();
      const f0 = faults().minor;
      let outputs;
      if (pool) {
        const x = session.tensor('float32', dims);
        fill(x.data);
        const pending = session.run({ [input]: x });
        session.release(x);
        outputs = await pending;
        for (const name of Object.keys(outputs)) session.release(outputs[name]);
      } else {
        const data = new Float32Array(dims.reduce((a, b) => a * b, 1));
        fill(data);
        outputs = await session.run({ [input]: new ort.Tensor('float32', data, dims) });
      }
      const run = { shape: dims.join('x'), faults: faults().minor - f0, rss: memoryUsage().rss };
      if (pool) {
        const s = pool.stats();
        Object.assign(run, {
          mode: s.adaptive ? s.adaptive.mode : pool.mode,
          generation: s.generation,
          osFallbacks: s.osFallbacks + s.osOversize - before.osFallbacks - before.osOversize,
          unplannedBorrows: s.unplannedBorrows - before.unplannedBorrows,
          arenaBytes: s.arenaBytes,
        });
      }
      runs.push(run);
    }
  }
  const s = pool && pool.stats();
  const adaptive = s && s.adaptive && { switchedAt: s.adaptive.history.map((h) => [h.iteration, h.reason]), abandoned: s.adaptive.abandoned, lastError: s.adaptive.lastError };
  console.log(JSON.stringify({ runs, peakRss: memoryUsage().peakRss, adaptive }));
}

main().catch((error) => {
  console.error(error && error.stack ? error.stack : String(error));
  process.exit(1);
});

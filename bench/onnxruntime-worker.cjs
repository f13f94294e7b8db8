// One configuration of bench/onnxruntime.ts in a process of its own (LD_PRELOADed for the peers and the
// preload route), driven over IPC so that the configurations' cycles interleave. Plain JavaScript on dist/:
// it runs under node itself, with nothing between the allocator and the process.
const crypto = require('node:crypto');
const ort = require('onnxruntime-node');
const { Pool, Plan, faults, memoryUsage, processPool } = require('../dist/index.js');
const { PooledSession } = require('../dist/onnxruntime.js');

let config;
let session; // a PooledSession, or an InferenceSession for the configurations that use plain arrays
let pool;
const inputs = new Map(); // "HxW" -> Float32Array: the same values in every configuration

function inputOf([height, width]) {
  const key = `${height}x${width}`;
  if (!inputs.has(key)) {
    const values = new Float32Array(3 * height * width);
    for (let i = 0; i < values.length; i++) values[i] = ((i * 2654435761) % 4093) / 4093;
    inputs.set(key, values);
  }
  return inputs.get(key);
}

let baseRssBytes = 0;

async function init(message) {
  config = message;
  // What the process holds before any tensor memory: node, ONNX Runtime's code, the allocator's own state
  // (a preloaded process pool's pre-faulted arena is tensor memory, made before this line ran).
  const preloaded = message.route === 'process' ? processPool() : null;
  baseRssBytes = memoryUsage().rss - (preloaded ? preloaded.stats().committedBytes : 0);
  const sessionOptions = { intraOpNumThreads: message.threads, interOpNumThreads: 1, enableCpuMemArena: message.arena };
  // tensorpool serves ONNX Runtime's tensors one by one: its memory pattern (a block per input shape) off.
  if (message.route !== 'plain') sessionOptions.enableMemPattern = false;
  if (message.route === 'plain') {
    session = await ort.InferenceSession.create(message.model, sessionOptions);
    return;
  }
  if (message.route === 'lend') pool = new Pool(message.plan ? { plan: Plan.read(message.plan) } : undefined);
  else pool = new Pool(); // inputs and outputs; ONNX Runtime's own allocations go to the process pool
  // A plan must hold the session's weights too: they are allocated when the session is created.
  if (message.record) pool.record();
  session = await PooledSession.create(pool, message.model, {
    ort,
    activations: message.route === 'lend' ? 'pool' : 'runtime',
    sessionOptions,
  });
}

// With `recordTo`, the recording stops once this run's input is made, before its mark: the last iteration
// recorded is whole (a run makes the next run's input before that run marks its iteration).
async function runOnce(shape, recordTo) {
  const values = inputOf(shape);
  const dims = [1, 3, shape[0], shape[1]];
  const f0 = faults().minor;
  const t0 = process.hrtime.bigint();
  let output;
  if (config.route === 'plain') {
    const x = new ort.Tensor('float32', new Float32Array(values.length), dims);
    x.data.set(values);
    const result = await session.run({ x });
    output = result[session.outputNames[0]];
  } else {
    const x = session.tensor('float32', dims);
    if (recordTo) pool.stopRecording('onnxruntime').writeCsv(recordTo);
    x.data.set(values);
    const pending = session.run({ x });
    session.release(x);
    output = (await pending)[session.session.outputNames[0]];
  }
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  const minorFaults = faults().minor - f0;
  const data = output.data;
  const hash = crypto.createHash('sha1').update(new Uint8Array(data.buffer, data.byteOffset, data.byteLength)).digest('hex');
  if (config.route !== 'plain') session.release(output);
  return { shape: `${shape[0]}x${shape[1]}`, ms, minorFaults, hash };
}

async function cycle(message) {
  const runs = [];
  for (const shape of config.shapes) runs.push(await runOnce(shape));
  if (message.record) await runOnce(config.shapes[0], message.record);
  process.send({ type: 'cycle', runs, rssBytes: memoryUsage().rss });
}

function finish() {
  const memory = memoryUsage();
  // The pool that serves ONNX Runtime: the process pool on the preload route, else the session's.
  const serving = config.route === 'process' ? processPool() : pool;
  const s = serving && serving.stats();
  process.send({
    type: 'finished',
    peakRssBytes: memory.peakRss,
    baseRssBytes,
    pool: s && { hits: s.hits, borrows: s.borrows, grown: s.grown, unplannedBorrows: s.unplannedBorrows, scheduleMisses: s.scheduleMisses, osFallbacks: s.osFallbacks, osOversize: s.osOversize, arenaBytes: s.arenaBytes, peakBytesLive: s.peakBytesLive },
  });
  process.disconnect();
}

process.on('message', (message) => {
  const step = message.type === 'init' ? init(message) : message.type === 'cycle' ? cycle(message) : Promise.resolve(finish());
  step.then(
    () => message.type === 'init' && process.send({ type: 'ready' }),
    (error) => {
      process.send({ type: 'error', message: String((error && error.stack) || error) });
      process.disconnect();
    },
  );
});

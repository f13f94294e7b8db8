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
let feedsOf; // shape -> the session's inputs for it: [{ name, type, dims }]

// What each element of an input holds: the same values in every configuration (floats in [0, 1), small
// integers, alternating booleans).
const ARRAYS = {
  float32: Float32Array, float64: Float64Array, int8: Int8Array, uint8: Uint8Array, int16: Int16Array,
  uint16: Uint16Array, int32: Int32Array, uint32: Uint32Array, int64: BigInt64Array, uint64: BigUint64Array,
  bool: Uint8Array,
};
const values = new Map(); // "name:type:dims" -> a typed array of the input's values
function valuesOf({ name, type, dims }) {
  const key = `${name}:${type}:${dims.join('x')}`;
  if (!values.has(key)) {
    const TypedArray = ARRAYS[type];
    if (!TypedArray) throw new Error(`input ${name} is of type ${type}, which this benchmark does not fill`);
    const array = new TypedArray(dims.reduce((a, b) => a * b, 1));
    for (let i = 0; i < array.length; i++) {
      const hash = (i * 2654435761) % 4093;
      if (type === 'bool') array[i] = i % 2;
      else if (type.startsWith('float')) array[i] = hash / 4093;
      else array[i] = type.endsWith('64') ? BigInt(hash % 97) : hash % 97;
    }
    values.set(key, array);
  }
  return values.get(key);
}

// Every input's dims for one entry of --shapes: the entry gives the first input's dims (or, for an image
// input [N, C, H, W], just H x W: N = 1 and C as the model says, else 3); a dimension the model names
// (dynamic) takes the value the first input gave that name, else 1; a fixed one is the model's.
function feedsFromMetadata(inference) {
  const metadata = inference.inputMetadata;
  if (!metadata || metadata.length === 0) {
    return (shape) => [{ name: inference.inputNames[0], type: 'float32', dims: shape.length === 2 ? [1, 3, ...shape] : shape }];
  }
  const fixed = (d) => typeof d === 'number' && d > 0;
  return (shape) => {
    const first = metadata[0];
    let dims = shape;
    if (shape.length === 2 && first.shape.length === 4) dims = [1, fixed(first.shape[1]) ? first.shape[1] : 3, ...shape];
    if (dims.length !== first.shape.length) {
      throw new Error(`--shapes entry ${shape.join('x')} does not fit input ${first.name} of ${first.shape.length} dimensions [${first.shape.join(', ')}]`);
    }
    const named = new Map();
    first.shape.forEach((d, i) => {
      if (fixed(d) && d !== dims[i]) throw new Error(`--shapes entry ${shape.join('x')}: input ${first.name} has ${d} in dimension ${i}, not ${dims[i]}`);
      if (typeof d === 'string') named.set(d, dims[i]);
    });
    return metadata.map((input, k) => ({
      name: input.name,
      type: input.type,
      dims: k === 0 ? dims : input.shape.map((d) => (fixed(d) ? d : named.get(d) ?? 1)),
    }));
  };
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
    feedsOf = feedsFromMetadata(session);
    return;
  }
  // Under the preload library the inputs and outputs are the process's malloc memory too, in the process
  // pool with ONNX Runtime's allocations (a Pool of their own held 49 MiB of default classes beside it).
  if (message.route === 'lend') pool = new Pool(message.plan ? { plan: Plan.read(message.plan), hugePages: Boolean(message.hugePages) } : undefined);
  else pool = processPool();
  // A plan must hold the session's weights too: they are allocated when the session is created.
  if (message.record) pool.record();
  session = await PooledSession.create(pool, message.model, {
    ort,
    activations: message.route === 'lend' ? 'pool' : 'runtime',
    sessionOptions,
  });
  feedsOf = feedsFromMetadata(session.session);
}

// With `recordTo`, the recording stops once this run's input is made, before its mark: the last iteration
// recorded is whole (a run makes the next run's input before that run marks its iteration).
async function runOnce(shape, recordTo) {
  const inputs = feedsOf(shape);
  const f0 = faults().minor;
  const t0 = process.hrtime.bigint();
  let outputs;
  if (config.route === 'plain') {
    const feeds = {};
    for (const input of inputs) {
      const data = new ARRAYS[input.type](valuesOf(input).length);
      data.set(valuesOf(input));
      feeds[input.name] = new ort.Tensor(input.type, data, input.dims);
    }
    outputs = await session.run(feeds);
  } else {
    const feeds = {};
    for (const input of inputs) feeds[input.name] = session.tensor(input.type, input.dims);
    // Under TENSORPOOL_RECORD the preload library writes the process pool's recording to that file at exit.
    if (recordTo && config.route === 'process') processPool().stopRecording();
    else if (recordTo) pool.stopRecording('onnxruntime').writeCsv(recordTo);
    for (const input of inputs) feeds[input.name].data.set(valuesOf(input));
    const pending = session.run(feeds);
    for (const input of inputs) session.release(feeds[input.name]);
    outputs = await pending;
  }
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  const minorFaults = faults().minor - f0;
  // Every output, in name order, bit for bit.
  const hash = crypto.createHash('sha1');
  for (const name of Object.keys(outputs).sort()) {
    const data = outputs[name].data;
    hash.update(name).update(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
    if (config.route !== 'plain') session.release(outputs[name]);
  }
  return { shape: shape.join('x'), ms, minorFaults, hash: hash.digest('hex') };
}

async function cycle(message) {
  const runs = [];
  for (const shape of config.shapes) runs.push(await runOnce(shape));
  if (message.record) await runOnce(config.shapes[0], message.record);
  process.send({ type: 'cycle', runs, rssBytes: memoryUsage().rss });
}

// Where adaptive mode stands at the end: its mode, the iterations it switched at, why it last gave up.
function adaptiveSummary(a) {
  return a && { mode: a.mode, switchedAt: a.history.map((h) => h.iteration), abandoned: a.abandoned, lastError: a.lastError };
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
    pool: s && { hits: s.hits, borrows: s.borrows, grown: s.grown, unplannedBorrows: s.unplannedBorrows, scheduleMisses: s.scheduleMisses, osFallbacks: s.osFallbacks, osOversize: s.osOversize, arenaBytes: s.arenaBytes, peakBytesLive: s.peakBytesLive, adaptive: adaptiveSummary(s.adaptive) },
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

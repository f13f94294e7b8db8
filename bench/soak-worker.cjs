// One worker_thread of bench/soak.ts: attaches to the soak's pool and allocates and releases from JS until
// told to stop. It keeps 16 blocks live, replacing a random one per operation, sizes drawn from the real
// traces; every block is stamped at allocation (a word at the start of every page and at its end, derived
// from the block's number) and checked before its release; a quarter of the releases are stream-ordered,
// with a fill of the block's first 64 KiB queued on one of two streams first, so the stream writes into the
// block after its release (a block handed out before the stream passed it would show as a corruption).
// Plain JavaScript on dist/, like the other bench workers.
const { workerData, parentPort } = require('node:worker_threads');
const { Pool, Stream } = require('../dist/index.js');

const { shared, sizes, seed, stop, counters } = workerData;
const stopFlag = new Int32Array(stop);
// [operations, corruptions, failures]: written here, read by the main thread every tick
const counts = new Float64Array(counters);
const SLOTS = 16;
const FILL_BYTES = 64 * 1024;

const pool = Pool.attach(shared);
const streams = [new Stream(), new Stream()];
const live = new Array(SLOTS).fill(null);
let state = seed >>> 0 || 1;
let serial = 0;

function random() {
  state ^= state << 13;
  state ^= state >>> 17;
  state ^= state << 5;
  return state >>> 0;
}

// The stamp of block n, cut to what the view holds (mask).
function stampOf(n, mask) {
  return ((Math.imul(n, 2654435761) ^ seed) & mask) >>> 0;
}

// Visits the stamp's places, (view, index, mask): the first word of every page and the last word of a
// Uint32Array over the block, or the first byte of a block below 4 bytes.
function forEachStamp(block, visit) {
  const words = new Uint32Array(block.buffer, 0, block.bytes >>> 2);
  if (words.length === 0) return visit(new Uint8Array(block.buffer), 0, 0xff);
  for (let w = 0; w < words.length; w += 1024) visit(words, w, 0xffffffff);
  visit(words, words.length - 1, 0xffffffff);
}

function allocate(slot) {
  const bytes = sizes[random() % sizes.length];
  let buffer;
  try {
    buffer = pool.alloc(bytes);
  } catch {
    counts[2]++;
    return;
  }
  const block = { buffer, bytes, n: ++serial };
  forEachStamp(block, (view, i, mask) => (view[i] = stampOf(block.n, mask)));
  live[slot] = block;
}

function release(slot) {
  const block = live[slot];
  live[slot] = null;
  let intact = true;
  forEachStamp(block, (view, i, mask) => (intact &&= view[i] === stampOf(block.n, mask)));
  if (!intact) counts[1]++;
  const r = random();
  if ((r & 3) === 0 && block.bytes >= 4) {
    const stream = streams[(r >>> 2) & 1];
    stream.fill(new Uint32Array(block.buffer, 0, Math.min(block.bytes, FILL_BYTES) >>> 2), block.n);
    pool.release(block.buffer, { stream });
  } else {
    pool.release(block.buffer);
  }
}

async function main() {
  while (Atomics.load(stopFlag, 0) === 0) {
    for (let k = 0; k < 1024; k++) {
      const slot = random() % SLOTS;
      if (live[slot]) release(slot);
      else allocate(slot);
    }
    counts[0] += 1024;
    await new Promise((resolve) => setImmediate(resolve)); // the streams' callbacks run between batches
  }
  for (let slot = 0; slot < SLOTS; slot++) if (live[slot]) release(slot);
  await Promise.all(streams.map((stream) => stream.close()));
  pool.close();
}

main().then(
  () => parentPort.postMessage({ done: true }),
  (error) => parentPort.postMessage({ done: false, error: String(error && error.stack) }),
);

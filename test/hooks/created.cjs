// An onnxruntime-node app that looks at the process pool (through tensorpool's own API) as soon as a
// session's create() has resolved: test/hooks.test.ts runs it under `tensorpool run` with decay off, so
// that only the hook's trim gives memory back. argv: model file, 'main' | 'worker' (the thread that
// creates the session). Prints one JSON line: the bytes the pool gave back while the session was created,
// what a trim right after found still to give back, and the code of trim(0)'s error.
const path = require('node:path');
const { Worker, isMainThread, workerData, parentPort } = require('node:worker_threads');
const ort = require('onnxruntime-node');
const { processPool } = require(path.resolve(__dirname, '../../dist/index.js'));

async function created(model) {
  const pool = processPool();
  const before = pool.stats().purgedBytes;
  const session = await ort.InferenceSession.create(model, { intraOpNumThreads: 1 });
  const seen = { purgedBytes: pool.stats().purgedBytes - before, trimmedAgain: pool.trim(), refused: null };
  try {
    pool.trim(0); // trim() takes no pad
  } catch (error) {
    seen.refused = error.code;
  }
  await session.release();
  return seen;
}

if (isMainThread && process.argv[3] === 'worker') {
  const worker = new Worker(__filename, { workerData: process.argv[2] });
  worker.on('message', (seen) => console.log(JSON.stringify(seen)));
  worker.on('error', (error) => { console.error(error); process.exitCode = 1; });
} else if (isMainThread) {
  created(process.argv[2]).then((seen) => console.log(JSON.stringify(seen)));
} else {
  created(workerData).then((seen) => parentPort.postMessage(seen));
}

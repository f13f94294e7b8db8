// A plain onnxruntime-node app (no tensorpool): test/hooks.test.ts runs it under `tensorpool run`.
// argv: model file, runs, how ('sequential' | 'concurrent' | 'arena' | 'worker' | 'path': onnxruntime-node
// required by its folder's path | 'early': the session test/hooks/early-session.cjs made in a --require
// before the app), batch.
// Prints one JSON line: the outputs' sums, one per run, and (sequential runs) the most memory its
// ArrayBuffers held after a run.
const path = require('node:path');
const { Worker, isMainThread, workerData, parentPort } = require('node:worker_threads');
const byPath = (isMainThread ? process.argv[4] : workerData[2]) === 'path';
const ort = byPath ? require(path.dirname(require.resolve('onnxruntime-node/package.json'))) : require('onnxruntime-node');

async function main([model, runs, how, batch]) {
  const options = how === 'arena' ? { enableCpuMemArena: true, enableMemPattern: true } : {};
  const session = how === 'early' ? await globalThis.earlySession : await ort.InferenceSession.create(model, { intraOpNumThreads: 1, ...options });
  const n = Number(batch);
  const input = () => {
    const values = new Float32Array(n * 8 * 32 * 32);
    for (let i = 0; i < values.length; i++) values[i] = ((i * 7919) % 1009) / 1009 - 0.5;
    return { x: new ort.Tensor('float32', values, [n, 8, 32, 32]) };
  };
  const sum = (r) => r.y.data.reduce((a, b) => a + b, 0);
  const sums = [];
  let buffers = 0; // the most ArrayBuffer memory after a run (dead inputs and outputs V8 has not collected)
  if (how === 'concurrent') {
    for (let i = 0; i < Number(runs); i += 4) sums.push(...(await Promise.all([0, 1, 2, 3].map(() => session.run(input())))).map(sum));
  } else {
    for (let i = 0; i < Number(runs); i++) {
      sums.push(sum(await session.run(input())));
      buffers = Math.max(buffers, process.memoryUsage().arrayBuffers);
    }
  }
  await session.release();
  return { sums, buffers };
}

if (!isMainThread) {
  main(workerData).then((out) => parentPort.postMessage(out));
} else if (process.argv[4] === 'worker') {
  const worker = new Worker(__filename, { workerData: process.argv.slice(2) });
  worker.on('message', (out) => console.log(JSON.stringify(out)));
  worker.on('error', (error) => { console.error(error); process.exitCode = 1; });
} else {
  main(process.argv.slice(2)).then((out) => console.log(JSON.stringify(out)));
}

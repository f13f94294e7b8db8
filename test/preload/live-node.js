// Runs under `tensorpool run` (test/live-stats.test.ts): allocates and releases buffers through processPool(),
// marks an iteration, prints its stats() as one JSON line, then prints them again for every line read on
// stdin. Between lines it runs no JavaScript (it waits in read()), so a reader of its pool meanwhile sees what
// the lines say.
const fs = require('node:fs');
const { processPool } = require('../../dist/index.js');

const pool = processPool();
const held = [];
for (let i = 0; i < 6; i++) {
  const buffer = pool.alloc((i + 1) << 20);
  new Uint8Array(buffer).fill(1);
  held.push(buffer);
}
pool.release(held[1]);
pool.release(held[3]);
pool.markIteration();

function say() {
  const { classes: _classes, adaptive: _adaptive, recording: _recording, ...counters } = pool.stats();
  console.log(JSON.stringify({ pid: process.pid, ...counters }));
}

say();
const line = Buffer.alloc(64);
const pause = new Int32Array(new SharedArrayBuffer(4));
for (;;) {
  let n;
  try {
    n = fs.readSync(0, line);
  } catch (error) {
    if (error.code !== 'EAGAIN') throw error;
    Atomics.wait(pause, 0, 0, 10);
    continue;
  }
  if (n === 0) break;
  say();
}

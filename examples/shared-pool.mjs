// One pool, two threads: the worker attaches to the pool the main thread made. Run: node examples/shared-pool.mjs
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';
import { Pool } from 'tensorpool';

if (isMainThread) {
  const pool = new Pool();
  const worker = new Worker(new URL(import.meta.url), { workerData: { pool: pool.share() } });
  worker.on('message', (bytes) => {
    console.log(`the worker allocated ${bytes} bytes; allocations counted by the pool: ${pool.stats().allocs}`);
  });
  worker.on('exit', () => pool.close());
} else {
  const pool = Pool.attach(workerData.pool); // the same arena
  const x = pool.float32(1 << 20);
  x.fill(3);
  pool.release(x);
  pool.close(); // closes this handle (its traffic reaches the pool's stats); the owner's close() closes the pool
  parentPort.postMessage(4 << 20);
}

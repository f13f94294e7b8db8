/**
 * One pool shared between threads: pool.share() in one thread, Pool.attach() in worker_threads (each a
 * Node.js environment of its own), all allocating from the same arena.
 */
import path from 'node:path';
import { Worker } from 'node:worker_threads';
import { describe, expect, it } from 'vitest';

import { Pool, TensorPoolError, readTrace, type SharedPool } from '../lib/index.js';
import { native } from '../lib/native.js';
import { nativePoolOf } from '../lib/pool/pool.js';
import { fixture } from './helpers.js';

const dist = path.resolve(__dirname, '../dist/index.js');

// A worker that attaches to `shared` and runs `body` (the source of an async function of (pool, tp, data)),
// posting what it returns; a thrown error comes back as { error: { code, message } }.
function inWorker(shared: SharedPool, body: string, data: unknown = null): { worker: Worker; result: Promise<any> } {
  const worker = new Worker(
    `const { parentPort, workerData } = require('node:worker_threads');
     const tp = require(${JSON.stringify(dist)});
     (async () => {
       const pool = tp.Pool.attach(workerData.shared);
       return (${body})(pool, tp, workerData.data);
     })().then((value) => parentPort.postMessage({ value }),
                (e) => parentPort.postMessage({ error: { code: e.code, message: e.message } }));`,
    { eval: true, workerData: { shared, data } },
  );
  const result = new Promise((resolve, reject) => {
    const answer = (message: { value?: unknown; error?: unknown }) => {
      if (!('value' in message) && !('error' in message)) return; // a message of the body's own
      worker.off('message', answer);
      resolve(message);
    };
    worker.on('message', answer);
    worker.once('error', reject);
  });
  return { worker, result };
}

async function finished(worker: Worker): Promise<void> {
  if (worker.threadId === -1) return;
  await new Promise((resolve) => worker.once('exit', resolve));
}

// Allocates `rounds` batches of `batch` blocks of the given sizes, stamps each with its own pattern, checks
// every stamp before releasing, half of them stream-ordered: answers the blocks served and the corruptions.
const STAMP_LOOP = `async (pool, tp, { rounds, batch, sizes, seed }) => {
  const stream = new tp.Stream();
  let served = 0, corruptions = 0, next = seed;
  for (let r = 0; r < rounds; r++) {
    const live = [];
    for (let i = 0; i < batch; i++) {
      next = (next * 1103515245 + 12345) >>> 0;
      const bytes = sizes[next % sizes.length];
      const view = new Uint32Array(pool.alloc(bytes), 0, bytes >>> 2);
      view.fill(next);
      live.push([view, next]);
      served++;
    }
    for (const [view, stamp] of live) {
      if (view[0] !== stamp || view[view.length - 1] !== stamp) corruptions++;
      if (stamp & 1) pool.release(view, { stream }); else pool.release(view);
    }
  }
  await stream.synchronize();
  stream.close();
  return { served, corruptions, attached: pool.attached };
}`;

describe('a pool shared with worker_threads', () => {
  it('serves two workers and its owner from one arena, every stamp intact, the stats counting all of them', async () => {
    const pool = new Pool();
    try {
      const shared = pool.share();
      expect(shared).toMatchObject({ kind: 'tensorpool.SharedPool', pid: process.pid, offsets: false });
      expect(pool.share().id).toBe(shared.id);
      const sizes = [256, 4096, 65536, 1 << 20, 3 << 20];
      const work = [1, 2].map((seed) => inWorker(shared, STAMP_LOOP, { rounds: 40, batch: 16, sizes, seed }));
      let ownerServed = 0;
      for (let r = 0; r < 40; r++) {
        const live = Array.from({ length: 8 }, (_, i) => pool.float32(1024 * (i + 1)).fill(r + i));
        live.forEach((view, i) => expect(view[view.length - 1]).toBe(r + i));
        live.forEach((view) => pool.release(view));
        ownerServed += live.length;
        await new Promise((resolve) => setImmediate(resolve));
      }
      const results = await Promise.all(work.map((w) => w.result));
      await Promise.all(work.map((w) => finished(w.worker)));
      for (const { value } of results) expect(value).toEqual({ served: 640, corruptions: 0, attached: true });
      const stats = pool.stats();
      expect(stats.allocs).toBe(ownerServed + 2 * 640);
      expect(stats.releases).toBe(stats.allocs);
      expect(stats.liveBlocks).toBe(0);
      expect(stats.osFallbacks).toBe(0);
    } finally {
      pool.close();
    }
  });

  it('serves native threads (replays on libuv threads, every block stamped and checked) beside a worker', async () => {
    const pool = new Pool();
    try {
      const trace = readTrace(fixture('traces', 'ocr_det_infer', 'ocr-320x320.csv.gz'));
      const replayers = [0, 1].map(
        () =>
          new native.NativeReplayer(nativePoolOf(pool), trace.ops, trace.eventBuffer, trace.sizes, {
            touch: 'verify',
            iterationMarks: false,
            unmarked: true,
          }),
      );
      const { worker, result } = inWorker(pool.share(), STAMP_LOOP, { rounds: 100, batch: 16, sizes: [4096, 100000, 1 << 20], seed: 3 });
      let replayed = 0;
      for (let round = 0; round < 5; round++) {
        const runs = replayers.map((replayer) => replayer.runAsync(false));
        expect(() => replayers[0]!.run(false)).toThrow(expect.objectContaining({ code: 'ERR_TP_BUSY' }));
        for (const r of await Promise.all(runs)) {
          expect(r).toMatchObject({ corruptions: 0, allocs: trace.sizes.length, releases: trace.sizes.length });
          replayed += r.allocs;
        }
      }
      expect((await result).value).toMatchObject({ served: 1600, corruptions: 0 });
      await finished(worker); // its front cache's last entries reach the pool when its thread ends
      const stats = pool.stats();
      expect(stats.allocs).toBe(replayed + 1600);
      expect(stats.iterations).toBe(0); // unmarked: the replays leave the marks to the pool's owner
      expect(stats.liveBlocks).toBe(0);
      expect(replayers[1]!.run(false).corruptions).toBe(0); // idle again
    } finally {
      pool.close();
    }
  });

  it('a replay on a pool closed under it says ERR_TP_CLOSED (not out of memory), on the calling thread or a libuv one', async () => {
    const trace = readTrace(fixture('traces', 'ocr_det_infer', 'ocr-320x320.csv.gz'));
    const replayerOf = (pool: Pool) =>
      new native.NativeReplayer(nativePoolOf(pool), trace.ops, trace.eventBuffer, trace.sizes, { touch: 'none', iterationMarks: false, unmarked: true });
    const closed = new Pool();
    const replayer = replayerOf(closed);
    closed.close();
    expect(() => replayer.run(false)).toThrow(expect.objectContaining({ code: 'ERR_TP_CLOSED', message: 'the pool was closed during the replay' }));
    await expect(replayer.runAsync(false)).rejects.toMatchObject({ code: 'ERR_TP_CLOSED' });
    // Closed while the replay runs on a libuv thread: it either finished first or stopped, refused by a closed pool.
    for (let round = 0; round < 4; round++) {
      const pool = new Pool();
      const run = replayerOf(pool).runAsync(false);
      pool.close();
      const outcome = await run.then(() => 'finished', (error: { code: string }) => error.code);
      expect(['finished', 'ERR_TP_CLOSED']).toContain(outcome);
    }
  });

  it('takes back the blocks a worker never released once the worker has gone', async () => {
    const pool = new Pool();
    try {
      const { worker, result } = inWorker(
        pool.share(),
        `async (pool) => {
           globalThis.kept = Array.from({ length: 10 }, () => pool.alloc(8192));
           setInterval(() => {}, 1000); // alive until terminated
           return pool.stats().liveBlocks;
         }`,
      );
      expect((await result).value).toBe(10);
      expect(pool.stats().liveBlocks).toBe(10);
      await worker.terminate();
      expect(pool.stats().liveBlocks).toBe(0);
      expect(pool.stats().releases).toBe(10);
    } finally {
      pool.close();
    }
  });

  it('leaves plan control to the owner, and an attached close() to that handle alone', async () => {
    const pool = new Pool();
    try {
      const { result } = inWorker(
        pool.share(),
        `async (pool) => {
           const codes = [];
           for (const call of [() => pool.markIteration(), () => pool.record(), () => pool.stopRecording()]) {
             try { call(); codes.push('none'); } catch (e) { codes.push(e.code); }
           }
           const kept = pool.alloc(100);
           pool.close();
           let afterClose = 'none';
           try { pool.alloc(100); } catch (e) { afterClose = e.code; }
           pool.release(kept);
           return { codes, afterClose, closed: pool.closed, plan: pool.plan };
         }`,
      );
      expect((await result).value).toEqual({
        codes: ['ERR_TP_NOT_OWNER', 'ERR_TP_NOT_OWNER', 'ERR_TP_NOT_OWNER'],
        afterClose: 'ERR_TP_CLOSED',
        closed: true,
        plan: null,
      });
      expect(pool.closed).toBe(false);
      pool.release(pool.alloc(100));
      expect(pool.stats()).toMatchObject({ allocs: 2, releases: 2, liveBlocks: 0 });
    } finally {
      pool.close();
    }
  });

  it("stops an attached handle serving, its front cache included, once the owner closes the pool; its blocks still come back", async () => {
    const pool = new Pool();
    const shared = pool.share();
    const { worker, result } = inWorker(
      shared,
      `async (pool, tp) => {
         const { parentPort } = require('node:worker_threads');
         pool.release(pool.alloc(4096));             // into this handle's front cache, where there is one
         const held = pool.alloc(65536);
         parentPort.postMessage({ ready: true });
         await new Promise((resolve) => parentPort.once('message', resolve));   // the owner closes the pool
         let code = 'none';
         try { pool.alloc(4096); } catch (e) { code = e.code; }
         pool.release(held);
         return { code, closed: pool.closed, live: pool.stats().liveBlocks };
       }`,
    );
    await new Promise((resolve) => worker.once('message', resolve)); // ready
    pool.close();
    worker.postMessage('closed');
    expect((await result).value).toEqual({ code: 'ERR_TP_CLOSED', closed: true, live: 0 });
    await finished(worker);
    expect(() => Pool.attach(shared)).toThrow(expect.objectContaining({ code: 'ERR_TP_CLOSED' }));
  });

  it('answers ERR_TP_CLOSED on every thread when the owner closes the pool while workers allocate, in every order', async () => {
    // Each worker allocates and releases blocks of several sizes (cache misses, so each one asks the pool)
    // until the pool refuses; the owner closes the pool while they run. The close unmaps every arena, and a
    // handle's next allocation must be refused, not read the arenas that are gone (a SIGSEGV, before).
    const LOOP = `async (pool, tp, { sizes }) => {
      const { parentPort } = require('node:worker_threads');
      let served = 0, code = 'none';
      const held = [];
      try {
        for (let i = 0; i < 50_000_000; i++) {
          held.push(pool.alloc(sizes[i % sizes.length]), pool.alloc(sizes[(i + 1) % sizes.length]));
          for (const block of held.splice(0)) pool.release(block);
          if (++served === 1000) parentPort.postMessage({ running: true });
        }
      } catch (e) {
        code = e.code;
      }
      for (const block of held) pool.release(block); // a block served before the close still goes back
      return { code, closed: pool.closed };
    }`;
    for (let round = 0; round < 8; round++) {
      const pool = new Pool();
      const shared = pool.share();
      const workers = [0, 1].map(() => inWorker(shared, LOOP, { sizes: [100, 4096, 5000, 70000, 300000, 1 << 20] }));
      await Promise.all(workers.map(({ worker }) => new Promise((resolve) => worker.once('message', resolve))));
      if (round % 2) await new Promise((resolve) => setTimeout(resolve, round)); // close at another moment
      pool.close();
      expect(() => pool.alloc(4096)).toThrow(expect.objectContaining({ code: 'ERR_TP_CLOSED' }));
      for (const { worker, result } of workers) {
        expect(await result).toEqual({ value: { code: 'ERR_TP_CLOSED', closed: true } });
        await finished(worker);
      }
      expect(pool.stats().liveBlocks).toBe(0);
    }
  }, 60_000);

  it('a block an attached handle releases is back in the pool at once, its handle dormant or not', async () => {
    const pool = new Pool({ plan: { interval: 4096, classes: [{ size: 65536, blocks: 1 }] } });
    const shared = pool.share();
    const { worker, result } = inWorker(
      shared,
      `async (attached, tp, shared) => {
         const { parentPort } = require('node:worker_threads');
         // A cache that keeps no block: the release goes to the pool, the handle stays with the cache.
         const pool = tp.Pool.attach(shared, { frontCache: { maxPerSize: 0 } });
         pool.release(pool.alloc(65536));
         parentPort.postMessage({ released: true });
         await new Promise((resolve) => parentPort.once('message', resolve));   // the owner took the block
         pool.close();
         return pool.stats().frontCache?.slept ?? null;
       }`,
      shared,
    );
    await new Promise((resolve) => worker.once('message', resolve)); // released, the worker now idle
    expect(pool.stats().liveBlocks).toBe(0);
    const buffer = pool.alloc(65536); // the one block: not an OS fallback
    expect(pool.stats().osFallbacks).toBe(0);
    pool.release(buffer);
    worker.postMessage('taken');
    expect((await result).value).toBe(pool.stats().frontCache ? 1 : null);
    await finished(worker);
    pool.close();
  });

  it('refuses what pool.share() did not make, clearly', () => {
    const pool = new Pool();
    try {
      const shared = pool.share();
      const attempts: [unknown, string][] = [
        [42, 'ERR_TP_INVALID_ARGUMENT'],
        [{ ...shared, kind: 'x' }, 'ERR_TP_INVALID_ARGUMENT'],
        [{ ...shared, id: 1.5 }, 'ERR_TP_INVALID_ARGUMENT'],
        [{ ...shared, closedFlag: new ArrayBuffer(4) }, 'ERR_TP_INVALID_ARGUMENT'],
        [{ ...shared, options: null }, 'ERR_TP_INVALID_ARGUMENT'],
        [{ ...shared, pid: process.pid + 1 }, 'ERR_TP_NOT_SHARED'],
        [{ ...shared, id: shared.id + 1000 }, 'ERR_TP_NOT_SHARED'],
      ];
      for (const [value, code] of attempts) {
        let error: unknown;
        try {
          Pool.attach(value as SharedPool);
        } catch (e) {
          error = e;
        }
        expect(error).toBeInstanceOf(code === 'ERR_TP_INVALID_ARGUMENT' ? TypeError : TensorPoolError);
        expect((error as TensorPoolError).code).toBe(code);
      }
      expect(() => Pool.attach(shared, { frontCache: 'yes' } as never)).toThrow(expect.objectContaining({ code: 'ERR_TP_INVALID_ARGUMENT' }));
      // A handle attached in the same thread is a handle like any other.
      const other = Pool.attach(shared, { frontCache: false });
      const buffer = other.alloc(1000);
      expect(pool.stats().liveBlocks).toBe(1);
      other.release(buffer);
      expect(pool.stats().liveBlocks).toBe(0);
      other.close();
    } finally {
      pool.close();
    }
  });
});

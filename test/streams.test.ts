import { describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import path from 'node:path';

import { OffsetPlan, Pool, Stream } from '../lib/index.js';
import { native } from '../lib/native.js';

const MiB = 1 << 20;

function newPool() {
  return new Pool({
    plan: { interval: 4096, classes: [{ size: 4096, blocks: 64 }, { size: 64 * 1024, blocks: 16 }, { size: 64 * MiB, blocks: 2 }] },
  });
}

/** Work that keeps a stream busy for a while (tens of milliseconds) before what is queued next. */
function slowWork(stream: Stream, scratch: Uint8Array, rounds = 12): void {
  for (let i = 0; i < rounds; i++) stream.fill(scratch, i);
}

describe('stream-ordered release (S4)', () => {
  it('the hazard: a block released with { stream } is not reused until the copy reading it has run', async () => {
    const pool = newPool();
    const stream = new Stream();
    const scratch = pool.uint8(64 * MiB);
    const a = pool.float32(16 * 1024); // 64 KiB class
    const b = pool.float32(16 * 1024);
    for (let i = 0; i < a.length; i++) a[i] = i;
    const addressOfA = native.bufferAddress(a.buffer as ArrayBuffer);
    slowWork(stream, scratch);
    stream.copy(b, a);
    pool.release(a, { stream });
    expect(a.length).toBe(0); // detached at once
    const handedOut = new Set<number>();
    for (let i = 0; i < 50; i++) {
      const x = pool.float32(16 * 1024);
      x.fill(-1);
      handedOut.add(native.bufferAddress(x.buffer as ArrayBuffer));
      pool.release(x);
    }
    expect(handedOut.has(addressOfA)).toBe(false); // the copy was still pending: A was not handed out
    expect(pool.stats().deferredPending).toBe(1);
    await stream.synchronize();
    for (let i = 0; i < b.length; i++) if (b[i] !== i) throw new Error(`b[${i}] = ${b[i]}: the copy read reused memory`);
    expect(pool.reclaim()).toBe(1);
    expect(pool.stats().deferredPending).toBe(0);
    await stream.close();
  });

  it('without { stream } the same sequence hands A out at once and the copy reads what was written there', async () => {
    const pool = newPool();
    const stream = new Stream();
    const scratch = pool.uint8(64 * MiB);
    const a = pool.float32(16 * 1024);
    const b = pool.float32(16 * 1024);
    for (let i = 0; i < a.length; i++) a[i] = i;
    const addressOfA = native.bufferAddress(a.buffer as ArrayBuffer);
    slowWork(stream, scratch);
    stream.copy(b, a);
    pool.release(a); // the hazard S4 exists for
    const x = pool.float32(16 * 1024);
    expect(native.bufferAddress(x.buffer as ArrayBuffer)).toBe(addressOfA); // reused while the copy still waits to run
    x.fill(-1);
    await stream.synchronize();
    expect(b[0]).toBe(-1); // the copy read the new owner's data, not A's
    pool.release(x);
    await stream.close();
  });

  it('in an offsets-mode pool a deferred block keeps its planned range until its event passes', async () => {
    // Two allocations of 64 KiB planned one after the other at the same offset.
    const size = 64 * 1024;
    const plan = new OffsetPlan(size, Float64Array.of(size, size), Float64Array.of(0, 0), size, 'by hand', true, {});
    const pool = new Pool({ offsets: plan });
    const stream = new Stream();
    const scratch = new Pool().uint8(64 * MiB);
    pool.markIteration();
    const a = pool.uint8(size);
    const addressOfA = native.bufferAddress(a.buffer as ArrayBuffer);
    slowWork(stream, scratch);
    pool.release(a, { stream });
    expect(() => pool.release(a)).toThrow();
    const b = pool.uint8(size); // planned over A, which the stream may still read: served elsewhere
    expect(native.bufferAddress(b.buffer as ArrayBuffer)).not.toBe(addressOfA);
    expect(pool.stats()).toMatchObject({ offsetHits: 1, offsetMisses: 1, deferredPending: 1 });
    pool.release(b);
    await stream.synchronize();
    expect(pool.reclaim()).toBe(1);
    pool.markIteration();
    const again = pool.uint8(size);
    expect(native.bufferAddress(again.buffer as ArrayBuffer)).toBe(addressOfA);
    expect(pool.stats()).toMatchObject({ offsetHits: 2, offsetMisses: 1, deferredPending: 0, liveBlocks: 1 });
    pool.release(again);
    await stream.close();
  });

  it('a worker_thread that exits with stream work and a switch in flight leaves the process intact', () => {
    // Node unloads the addon with the worker's environment: no stream thread, no libuv work and no
    // thread-safe function of ours may still run or be called then (this used to end in SIGSEGV).
    const dist = JSON.stringify(path.resolve('dist'));
    const body = `
      const { Pool, Stream, train, syntheticTrainingTrace } = require(${dist});
      const { nativePoolOf } = require(${dist} + '/pool/pool.js');
      const { toNativePlan } = require(${dist} + '/plan/plan-spec.js');
      const pool = new Pool();
      const stream = new Stream();
      const big = pool.uint8(32 << 20);
      for (let i = 0; i < 4; i++) stream.fill(big, i);
      stream.record().synchronize();
      pool.release(pool.uint8(4096), { stream });
      nativePoolOf(pool).prepareSwitch(toNativePlan(train(syntheticTrainingTrace({ layers: 8, iterations: 2 })))).catch(() => {});
      process.exit(0);`;
    const script = `
      const { Worker } = require('node:worker_threads');
      let exited = 0;
      const spawn = () => new Worker(${JSON.stringify(body)}, { eval: true }).on('exit', (code) => {
        if (code !== 0) throw new Error('worker exit code ' + code);
        if (++exited < 8) spawn(); else console.log('all exited');
      });
      spawn();`;
    const run = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8', timeout: 60_000 });
    expect(run.signal).toBeNull();
    expect(run.status).toBe(0);
    expect(run.stdout.trim()).toBe('all exited');
  });

  it('a tracked promise holds back the work and the releases queued after it, resolved or rejected', async () => {
    for (const outcome of ['resolve', 'reject'] as const) {
      const pool = newPool();
      const stream = new Stream();
      let settle!: () => void;
      const promise = new Promise<void>((resolve, reject) => {
        settle = outcome === 'resolve' ? resolve : () => reject(new Error('inference failed'));
      });
      promise.catch(() => {});
      const input = pool.float32(1024);
      stream.track(promise);
      const after = stream.record();
      pool.release(input, { stream });
      await new Promise((r) => setTimeout(r, 30));
      expect(after.query()).toBe(false);
      expect(pool.reclaim()).toBe(0);
      expect(pool.stats().deferredPending).toBe(1);
      settle();
      await after.synchronize();
      expect(after.query()).toBe(true);
      expect(pool.reclaim()).toBe(1);
      await stream.close();
    }
  });

  it('a tracked thenable whose then() throws still opens the stream: later work runs and close() settles', async () => {
    const stream = new Stream();
    const hostile = { then: () => { throw new Error('broken thenable'); } };
    stream.track(hostile as unknown as PromiseLike<unknown>);
    const after = stream.record();
    await after.synchronize();
    expect(after.query()).toBe(true);
    await stream.close();
  });

  it('reuses events: 100k deferred releases create no more events than were pending at once', async () => {
    const pool = newPool();
    const stream = new Stream();
    let maxPending = 0;
    for (let i = 0; i < 100_000; i++) {
      const x = pool.uint8(4096);
      if (i % 1000 === 0) stream.fill(x, i & 0xff);
      pool.release(x, { stream });
      maxPending = Math.max(maxPending, pool.stats().deferredPending);
    }
    await stream.synchronize();
    pool.reclaim();
    const s = pool.stats();
    expect(s.deferredPending).toBe(0);
    expect(s.eventsCreated + s.eventsReused).toBe(100_000);
    expect(s.eventsCreated).toBeLessThanOrEqual(maxPending);
    expect(s.eventsReused).toBeGreaterThan(90_000);
    await stream.close();
  });

  it('several streams at once, each releasing in its own order; axpy and fill compute', async () => {
    const pool = newPool();
    const streams = [new Stream(), new Stream(), new Stream()];
    const ys = streams.map(() => pool.float32(1000));
    const xs = streams.map(() => pool.float32(1000));
    streams.forEach((s, k) => {
      s.fill(xs[k], k + 1).fill(ys[k], 10).axpy(2, xs[k], ys[k]);
    });
    await Promise.all(streams.map((s) => s.synchronize()));
    ys.forEach((y, k) => expect(Array.from(y.subarray(0, 3))).toEqual([10 + 2 * (k + 1), 10 + 2 * (k + 1), 10 + 2 * (k + 1)]));
    streams.forEach((s, k) => {
      pool.release(xs[k], { stream: s });
      pool.release(ys[k], { stream: s });
    });
    await Promise.all(streams.map((s) => s.synchronize()));
    expect(pool.reclaim()).toBe(6);
    const ints = pool.int32(8);
    const bigs = pool.allocArray(BigInt64Array, 4);
    const doubles = pool.float64(4);
    streams[0].fill(ints, -7).fill(bigs, -3n).fill(doubles, 1.5);
    await streams[0].synchronize();
    expect(Array.from(ints)).toEqual(Array(8).fill(-7));
    expect(Array.from(bigs)).toEqual(Array(4).fill(-3n));
    expect(Array.from(doubles)).toEqual(Array(4).fill(1.5));
    await Promise.all(streams.map((s) => s.close()));
  });

  it('closing: a closed pool still takes back stream-released blocks and unmaps once the stream passes', async () => {
    const pool = newPool();
    const stream = new Stream();
    const scratch = pool.uint8(64 * MiB);
    const x = pool.uint8(4096);
    slowWork(stream, scratch, 6);
    pool.release(x, { stream });
    pool.release(scratch, { stream });
    pool.close();
    expect(pool.stats().arenas).toBe(1); // the stream still uses the arena
    await stream.synchronize();
    await new Promise((r) => setTimeout(r, 20));
    expect(pool.stats().deferredPending).toBe(0); // a closed pool reclaims as the stream moves on
    expect(pool.stats().arenas).toBe(0);
    await stream.close();
  });

  it('close({ cancel: true }) drops queued work, releases a wait on an unsettled promise, and frees blocks after it', async () => {
    const pool = newPool();
    const stream = new Stream();
    const target = pool.uint8(4096);
    target.fill(1);
    stream.track(new Promise(() => {})); // never settles
    stream.fill(target, 9);
    pool.release(pool.uint8(4096), { stream });
    await stream.close({ cancel: true });
    expect(target[0]).toBe(1); // the fill was cancelled, not run
    expect(pool.reclaim()).toBe(1);
    expect(() => stream.fill(target, 2)).toThrow(/the stream is closed/);
  });

  it('memory a task uses is never unmapped under it, even when released without { stream }', async () => {
    const pool = new Pool({ plan: { interval: 4096, classes: [{ size: 4096, blocks: 1 }] } });
    const stream = new Stream();
    const big = pool.uint8(32 * MiB); // above every class: an mmap'd OS block
    const other = pool.uint8(32 * MiB);
    for (let i = 0; i < 8; i++) stream.fill(big, i);
    stream.copy(other, big);
    pool.release(big); // unmapped only once the stream's tasks are done
    pool.close();
    await stream.synchronize();
    expect(other[12345]).toBe(7);
    pool.release(other);
    await stream.close();
  });

  it('a stream dropped with work queued still runs it (and its memory stays pinned until then)', async () => {
    const pool = newPool();
    const target = pool.uint8(4096);
    const scratch = pool.uint8(64 * MiB);
    (() => {
      const stream = new Stream();
      slowWork(stream, scratch, 4);
      stream.fill(target, 42);
    })();
    const gc = (globalThis as { gc?: () => void }).gc!;
    for (let i = 0; i < 50 && target[0] !== 42; i++) {
      gc();
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(target[0]).toBe(42);
  });

  it('rejects what a stream cannot take', async () => {
    const pool = newPool();
    const stream = new Stream();
    const x = pool.float32(16);
    const code = (fn: () => unknown) => {
      try {
        fn();
      } catch (error) {
        return (error as { code?: string }).code;
      }
      return 'no error';
    };
    expect(code(() => stream.fill(new Float32Array(4), 1))).toBe('ERR_TP_FOREIGN_BUFFER');
    expect(code(() => stream.fill(new DataView(x.buffer), 1))).toBe('ERR_TP_INVALID_ARGUMENT');
    expect(code(() => stream.fill(x, 'one' as never))).toBe('ERR_TP_INVALID_ARGUMENT');
    expect(code(() => stream.copy(pool.float32(4), x))).toBe('ERR_TP_INVALID_ARGUMENT');
    expect(code(() => stream.axpy(1, x, pool.float32(8)))).toBe('ERR_TP_INVALID_ARGUMENT');
    expect(code(() => stream.track(5 as never))).toBe('ERR_TP_INVALID_ARGUMENT');
    expect(code(() => pool.release(x, { stream: {} as never }))).toBe('ERR_TP_INVALID_ARGUMENT');
    const before = pool.stats();
    pool.release(x, { stream });
    expect(code(() => pool.release(x, { stream }))).toBe('ERR_TP_DOUBLE_RELEASE');
    expect(code(() => stream.fill(x, 1))).toBe('ERR_TP_DOUBLE_RELEASE');
    expect(pool.stats().deferredPending).toBe(before.deferredPending + 1);
    await stream.close();
  });
});

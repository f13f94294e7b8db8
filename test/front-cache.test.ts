import { describe, expect, it } from 'vitest';

import { Pool, Stream, memoryUsage, syntheticTrainingTrace, train, type PoolStats } from '../lib/index.js';
import { DORMANT_MARKS, FRONT_CACHE_SUPPORTED } from '../lib/pool/front-cache.js';
import { toNativePlan } from '../lib/plan/plan-spec.js';
import { nativePoolOf, stopFrontCache } from '../lib/pool/pool.js';
import type { Trace } from '../lib/trace/trace.js';
import { ShadowBlocks, expectCode, patternIntact, runTrace, seededRandom, underAsan } from './helpers.js';

const KiB = 1024;
const plan = {
  interval: 4096,
  classes: [
    { size: 4096, blocks: 8 },
    { size: 8192, blocks: 8 },
    { size: 65536, blocks: 4 },
    { size: 1 << 20, blocks: 2 },
  ],
};
// Few sizes, so that releases and allocations meet in the cache.
const SIZES = [64, 1000, 4096, 5000, 8192, 40 * KiB, 65536, 300 * KiB, 1 << 20, 3 << 20];

async function collectGarbage(pool: Pool, done: (s: PoolStats) => boolean): Promise<void> {
  const gc = (globalThis as { gc?: () => void }).gc!;
  for (let round = 0; round < 20 && !done(pool.stats()); round++) {
    gc();
    await new Promise((resolve) => setImmediate(resolve));
  }
}

describe.runIf(FRONT_CACHE_SUPPORTED)('front cache (Node.js >= 22)', () => {
  // maxPerSize 0: the cache keeps no block, so every release goes to the pool and its handle sleeps.
  it.each([
    ['cached', {}],
    ['dormant', { maxPerSize: 0 }],
  ] as const)('100k seeded operations with stream releases, a plan switch and close(): no overlap, no corruption, exact counts (%s handles)', async (kind, frontCache) => {
    const pool = new Pool({ frontCache }); // the default classes, growing; a plan after the switch
    const stream = new Stream();
    const random = seededRandom(20261124);
    const shadow = new ShadowBlocks();
    const live = shadow.held;
    let allocs = 0;
    let releases = 0;
    for (let op = 0; op < 100_000; op++) {
      if (op === 50_000) {
        // A new plan serves from here: cached blocks of the old one go back to it.
        nativePoolOf(pool).switchPlan(toNativePlan({ interval: 4096, classes: [{ size: 8192, blocks: 16 }, { size: 1 << 20, blocks: 4 }] }));
      }
      if (op % 997 === 0) pool.markIteration();
      if (live.length === 0 || (live.length < 40 && random() < 0.55)) {
        const size = SIZES[Math.floor(random() * SIZES.length)];
        shadow.add(pool.alloc(size), size, op);
        allocs++;
      } else {
        const victim = shadow.take(Math.floor(random() * live.length));
        if (random() < 0.1) {
          // Stream-ordered: a fill queued on the stream still writes the block; it is reused only after.
          stream.fill(victim.bytes, 0xab);
          pool.release(victim.buffer, { stream });
        } else {
          pool.release(victim.buffer);
        }
        releases++;
      }
    }
    const s = pool.stats();
    expect(kind === 'cached' ? s.frontCache!.served : s.frontCache!.woken).toBeGreaterThan(10_000);
    expect(s.allocs).toBe(allocs);
    expect(s.releases).toBe(releases);
    expect(s.hits + s.borrows + s.osFallbacks + s.osOversize).toBe(allocs);
    expect(s.liveBlocks).toBe(live.length);
    expect(s.bytesLive).toBe(live.reduce((n, l) => n + l.bytes.length, 0));
    expect(s.cacheRejected).toBe(0);
    expect(s.cachedBlocks).toBe(s.frontCache!.buffers);
    for (const l of live) expect(patternIntact(l.bytes, l.seed)).toBe(true);
    pool.close();
    expect(pool.stats().cachedBlocks).toBe(0);
    expect(pool.stats().frontCache!.dormant).toBe(0);
    for (const l of live) pool.release(l.buffer); // blocks still come back after close
    await stream.synchronize();
    pool.reclaim();
    expect(pool.stats().arenas).toBe(0);
    stream.close();
  });

  it('detaches the released handle: every typed array and DataView over it reads length 0', () => {
    const pool = new Pool();
    const buffer = pool.alloc(4096);
    const views = [Int8Array, Uint8Array, Uint8ClampedArray, Int16Array, Uint16Array, Int32Array, Uint32Array, Float32Array, Float64Array, BigInt64Array, BigUint64Array].map(
      (T) => new T(buffer),
    );
    const dataView = new DataView(buffer);
    new Uint8Array(buffer).fill(7);
    pool.release(views[3]);
    expect(pool.stats().frontCache!.taken).toBe(1);
    expect(buffer.byteLength).toBe(0);
    for (const view of views) expect(view.length).toBe(0);
    expect(() => dataView.getUint8(0)).toThrow(TypeError);
    // The block comes back, from the cache, with its contents (like malloc).
    const again = pool.uint8(4096);
    expect(pool.stats().frontCache!.served).toBe(1);
    expect(again[4095]).toBe(7);
    pool.release(again);
    pool.close();
  });

  it.runIf(!underAsan).each([
    ['cached', {}],
    ['dormant', { maxPerSize: 0 }],
  ] as const)('a synchronous loop of alloc/release pairs leaves the C heap as it found it (%s handles)', (kind, frontCache) => {
    // A handle N-API detaches leaves Node its finalizer and bookkeeping (~290 B) until the event loop turns:
    // 200k pairs would hold ~58 MB. The cache moves handles instead (transfer()), so nothing is left behind.
    const pool = new Pool({ frontCache });
    for (let i = 0; i < 1000; i++) pool.release(pool.alloc(4096));
    const before = memoryUsage().cHeapInUse;
    for (let i = 0; i < 200_000; i++) pool.release(pool.alloc(4096));
    // The C heap is the whole process's: V8's compiler and collector threads allocate in it meanwhile (up to
    // ~24 B a pair measured on a loaded machine, ~0.5 B when quiet), far below what each pair would leave.
    const grown = memoryUsage().cHeapInUse - before;
    expect(grown / 200_000).toBeLessThan(64);
    pool.close();
  });

  it('wrong releases throw and change nothing: twice, a stale view, another pool, a buffer of its own', () => {
    const pool = new Pool({ plan });
    const other = new Pool({ plan });
    const a = pool.float32(1024);
    pool.release(a);
    const before = pool.stats();
    expectCode(() => pool.release(a), 'ERR_TP_DOUBLE_RELEASE');
    expectCode(() => pool.release(a.buffer as ArrayBuffer), 'ERR_TP_DOUBLE_RELEASE');
    const b = other.float32(1024);
    expectCode(() => pool.release(b), 'ERR_TP_FOREIGN_BUFFER');
    expect(b.length).toBe(1024); // not detached: it is still the other pool's
    expectCode(() => pool.release(new ArrayBuffer(4096)), 'ERR_TP_FOREIGN_BUFFER');
    const after = pool.stats();
    expect([after.releases, after.cachedBlocks, after.liveBlocks]).toEqual([before.releases, before.cachedBlocks, before.liveBlocks]);
    other.release(b);
    pool.close();
    other.close();
  });

  it('a cached block never makes a request borrow, grow or go to the OS', () => {
    const pool = new Pool({ plan: { interval: 4096, classes: [{ size: 4096, blocks: 1 }, { size: 65536, blocks: 1 }] } });
    pool.release(pool.alloc(4000)); // into the cache, under 4000 bytes
    const other = pool.alloc(3000); // same class, another length: the cache gives its block back first
    const s = pool.stats();
    expect([s.hits, s.borrows, s.osFallbacks, s.cachedBlocks]).toEqual([2, 0, 0, 0]);
    pool.release(other);
    pool.close();
  });

  it('gives back at markIteration() what the iteration did not need', () => {
    const pool = new Pool();
    const iteration = (sizes: number[]) => {
      const buffers = sizes.map((n) => pool.alloc(n));
      for (const b of buffers) pool.release(b);
      pool.markIteration();
    };
    iteration([1000, 1000, 5000]);
    iteration([1000, 1000, 5000]);
    expect(pool.stats().frontCache!.buffers).toBe(3); // each used in the iteration: kept
    iteration([1000]);
    // 5000 was not needed, nor one of the two 1000s (the stack of 1000 never went below one).
    expect(pool.stats().frontCache!.buffers).toBe(1);
    expect(pool.stats().frontCache!.returned).toBe(2);
    pool.close();
  });

  it('a buffer served from the cache and dropped without release() comes back through its finalizer', async () => {
    const pool = new Pool({ plan });
    (() => {
      pool.release(pool.alloc(4096));
      pool.alloc(4096); // served from the cache, then dropped
    })();
    expect(pool.stats().frontCache!.served).toBe(1);
    await collectGarbage(pool, (s) => s.liveBlocks === 0);
    const s = pool.stats();
    expect(s.liveBlocks).toBe(0);
    expect(s.finalized).toBe(1);
    expect(s.classes[0].free).toBe(8);
    pool.close();
  });

  it('a trained plan is served exactly as training predicted: the cache follows its schedule', () => {
    const random = seededRandom(7);
    // Three iterations of one pattern with sizes that share classes and borrow.
    const pattern = Array.from({ length: 60 }, () => SIZES[Math.floor(random() * 8)]);
    const run = (pool: Pool, iterations: number) => {
      for (let it = 0; it < iterations; it++) {
        const live: ArrayBuffer[] = [];
        for (const [k, size] of pattern.entries()) {
          live.push(pool.alloc(size));
          if (k % 3 === 2) pool.release(live.splice(Math.floor(live.length / 2), 1)[0]);
        }
        for (const b of live) pool.release(b);
        pool.markIteration();
      }
    };
    const recorder = new Pool({ frontCache: false });
    recorder.record();
    run(recorder, 1);
    // Class blocks: every block interchangeable within its class (time-shared plans: the next test).
    const trained = train(recorder.stopRecording(), { share: false });
    recorder.close();
    const pool = new Pool({ plan: trained });
    run(pool, 5);
    const s = pool.stats();
    expect(s.frontCache!.served).toBeGreaterThan(0);
    expect(s.osFallbacks + s.osOversize).toBe(0);
    expect(s.scheduleMisses).toBe(0);
    expect(s.borrows).toBe(5 * (trained.training.borrows ?? Number.NaN));
    pool.close();
  });

  it('a time-shared plan: the cache keeps the blocks its schedule names again before their sharers, and the plan is served exactly', () => {
    const trace = syntheticTrainingTrace({ layers: 30, iterations: 4, seed: 3 });
    const plan = train(trace, { share: true });
    expect(plan.layout).toBeDefined();
    const serveRepeatedly = (frontCache: boolean) => {
      const pool = new Pool({ plan, prefault: false, frontCache });
      for (let rep = 0; rep < 4; rep++) {
        // Contents checked at every release: a cached block handed out while a block sharing its memory is
        // live would be overwritten.
        const live = runTrace(pool, trace, { marks: true, patterns: true });
        for (const buffer of live.values()) pool.release(buffer);
        pool.markIteration();
      }
      const s = pool.stats();
      pool.close();
      return s;
    };
    const cached = serveRepeatedly(true);
    const uncached = serveRepeatedly(false);
    expect(cached.frontCache!.served).toBeGreaterThan(0); // 0 before time-shared blocks were cacheable
    // The blocks it may not keep: their handles sleep and serve the same block and length when it comes back.
    expect(cached.frontCache!.woken).toBeGreaterThan(0);
    for (const s of [cached, uncached]) {
      expect(s.osFallbacks + s.osOversize).toBe(0);
      expect(s.busySkips).toBe(0);
    }
    expect(cached.scheduleHits).toBe(uncached.scheduleHits);
    expect(cached.borrows).toBe(uncached.borrows);
  });

  it('records the same trace with the cache on (keeping blocks, or dormant handles only) as with it off', () => {
    const traceOf = (frontCache: boolean | { maxPerSize: number }): Trace => {
      const pool = new Pool({ frontCache });
      const random = seededRandom(99);
      const stream = new Stream();
      pool.record();
      const live: ArrayBuffer[] = [];
      for (let op = 0; op < 20_000; op++) {
        if (op % 500 === 0) pool.markIteration();
        if (live.length === 0 || (live.length < 30 && random() < 0.55)) {
          live.push(pool.alloc(SIZES[Math.floor(random() * SIZES.length)]));
        } else {
          const [victim] = live.splice(Math.floor(random() * live.length), 1);
          if (random() < 0.05) pool.release(victim, { stream }); else pool.release(victim);
        }
      }
      const trace = pool.stopRecording('same');
      expect(pool.stats().frontCache === null).toBe(!frontCache);
      for (const b of live) pool.release(b);
      pool.close();
      stream.close();
      return trace;
    };
    const without = traceOf(false);
    for (const withCache of [traceOf(true), traceOf({ maxPerSize: 0 })]) {
      expect(withCache.eventCount).toBeGreaterThan(20_000);
      for (const column of ['ops', 'eventBuffer', 'eventStream', 'sizes', 'starts', 'ends'] as const) {
        expect(Array.from(withCache[column]), column).toEqual(Array.from(without[column]));
      }
      expect(withCache.iterationStarts).toEqual(without.iterationStarts);
    }
  });

  it('a block it may not keep goes back to the pool; its handle sleeps and serves the block at that length again', async () => {
    const pool = new Pool({ plan, frontCache: { maxPerSize: 0 } });
    const first = pool.alloc(4096);
    new Uint8Array(first).fill(7);
    const [floats, data] = [new Float32Array(first), new DataView(first)];
    pool.release(first);
    expect(first.byteLength).toBe(0); // the owner's handle is detached, as by a native release
    expect(floats.length).toBe(0);
    expect(() => data.getUint8(0)).toThrow(TypeError);
    expect(() => pool.release(first)).toThrow(/already released/);
    let s = pool.stats();
    expect(s.liveBlocks).toBe(0); // the block is back in the pool, not held by the cache
    expect(s.classes[0].free).toBe(8);
    expect(s.frontCache).toMatchObject({ slept: 1, dormant: 1, woken: 0, buffers: 0 });
    const other = pool.alloc(3000); // the same block at another length: a handle of its own
    expect(other.byteLength).toBe(3000);
    expect(pool.stats().frontCache).toMatchObject({ woken: 0 });
    pool.release(other);
    (() => {
      const again = pool.alloc(4096); // the same block and length: the dormant handle
      expect(again.byteLength).toBe(4096);
      expect(new Uint8Array(again)[4095]).toBe(7);
      expect(pool.stats().frontCache).toMatchObject({ woken: 1, dormant: 1 }); // 3000's sleeps now
    })(); // dropped without release: the finalizer follows the handle to its new allocation
    await collectGarbage(pool, (x) => x.liveBlocks === 0);
    s = pool.stats();
    expect(s.liveBlocks).toBe(0);
    expect(s.finalized).toBe(1);
    expect(s.allocs).toBe(3);
    expect(s.releases).toBe(3); // two released, one finalized
    pool.close();
    expect(pool.stats().frontCache!.dormant).toBe(0);
  });

  it('a block it gives back keeps its handle dormant; turning the cache off drops every dormant handle first', () => {
    const pool = new Pool({ plan });
    const buffers = [pool.alloc(4096), pool.alloc(4096)];
    for (const b of buffers) pool.release(b); // both cached
    pool.markIteration();
    pool.markIteration(); // neither was needed: given back, their handles dormant
    expect(pool.stats().frontCache).toMatchObject({ buffers: 0, returned: 2, dormant: 2 });
    expect(pool.stats().cachedBlocks).toBe(0);
    const again = pool.alloc(4096);
    expect(pool.stats().frontCache!.woken).toBe(1);
    pool.release(again); // kept by the cache again
    pool.release(pool.alloc(8192)); // cached
    pool.release(pool.alloc(3000)); // another length of a 4096 block: not kept, its handle dormant (still in the log)
    // Lending the pool to native code turns the cache off: nothing it dropped may serve an allocation.
    stopFrontCache(pool);
    for (const size of [4096, 8192, 3000]) {
      const buffer = pool.alloc(size);
      expect(buffer).toBeInstanceOf(ArrayBuffer);
      expect(buffer.byteLength).toBe(size);
      pool.release(buffer);
    }
    expect(pool.stats().liveBlocks).toBe(0);
    pool.close();
  });

  it('drops dormant handles unused for DORMANT_MARKS marks, and holds at most maxDormant', () => {
    const pool = new Pool({ plan, frontCache: { maxPerSize: 0, maxDormant: 2 } });
    const buffers = [pool.alloc(4096), pool.alloc(8192), pool.alloc(65536)];
    for (const b of buffers) pool.release(b);
    expect(pool.stats().frontCache).toMatchObject({ slept: 2, dormant: 2 }); // the third was released natively
    for (let m = 1; m < DORMANT_MARKS; m++) pool.markIteration();
    expect(pool.stats().frontCache!.dormant).toBe(2);
    pool.markIteration();
    expect(pool.stats().frontCache!.dormant).toBe(0);
    const again = pool.alloc(4096); // a new handle: nothing woke
    expect(pool.stats().frontCache!.woken).toBe(0);
    pool.release(again);
    pool.close();
    expectCode(() => new Pool({ frontCache: { maxDormant: 1.5 } }), 'ERR_TP_INVALID_ARGUMENT');
  });

  it('takes its options, and is off in offsets mode', () => {
    const pool = new Pool({ frontCache: { maxBytes: 8192, maxPerSize: 1 } });
    const [a, b, c] = [pool.alloc(4096), pool.alloc(4096), pool.alloc(8192)];
    for (const x of [a, b, c]) pool.release(x);
    expect(pool.stats().frontCache!.buffers).toBe(1); // one per size; 8192 more would pass maxBytes
    pool.close();
    expect(new Pool({ frontCache: false }).stats().frontCache).toBeNull();
    expectCode(() => new Pool({ frontCache: { maxBytes: -1 } }), 'ERR_TP_INVALID_ARGUMENT');
    expectCode(() => new Pool({ frontCache: { size: 1 } as never }), 'ERR_TP_INVALID_ARGUMENT');
  });
});

describe.runIf(!FRONT_CACHE_SUPPORTED)('front cache (Node.js < 22)', () => {
  it('is not there: every alloc and release crosses into native code as before', () => {
    const pool = new Pool();
    pool.release(pool.alloc(4096));
    pool.release(pool.alloc(4096));
    const s = pool.stats();
    expect(s.frontCache).toBeNull();
    expect(s.cachedBlocks).toBe(0);
    pool.close();
  });
});

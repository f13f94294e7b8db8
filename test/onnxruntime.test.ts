import { afterAll, describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as ort from 'onnxruntime-node';

import { Pool, TensorPoolError, faults } from '../lib/index.js';
import {
  PooledSession,
  lendToOnnxRuntime,
  onnxRuntimeAllocatorStats,
  onnxRuntimeLibrary,
  pooledTensor,
  stopLendingToOnnxRuntime,
} from '../lib/onnxruntime.js';
import { CHANNELS, CLASSES, SIDE, inputValues, nonZeroModel, smallModel } from './onnx-model.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-onnxruntime-'));
const modelFile = path.join(tmp, 'small.onnx');
fs.writeFileSync(modelFile, smallModel());
const BATCH = 4;
const dims = [BATCH, CHANNELS, SIDE, SIDE];
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

/** The model's output for the fixed input, on plain Float32Arrays and ONNX Runtime's default allocator. */
async function reference(batch = BATCH): Promise<Float32Array> {
  const session = await ort.InferenceSession.create(modelFile, { intraOpNumThreads: 1 });
  const result = await session.run({ x: new ort.Tensor('float32', inputValues(batch), [batch, CHANNELS, SIDE, SIDE]) });
  await session.release();
  return Float32Array.from(result.y.data as Float32Array);
}

function expectCode(fn: () => unknown, code: string): void {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(TensorPoolError);
    expect((error as TensorPoolError).code).toBe(code);
    return;
  }
  throw new Error(`expected ${code}`);
}

async function expectRejection(promise: Promise<unknown>, code: string, message?: RegExp): Promise<void> {
  const error = await promise.then(
    () => null,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(TensorPoolError);
  expect((error as TensorPoolError).code).toBe(code);
  if (message) expect((error as Error).message).toMatch(message);
}

describe('onnxruntime-node on the pool (tensorpool/onnxruntime)', () => {
  it('pooled inputs and outputs: the same outputs as plain Float32Arrays, outputs pre-allocated in the pool once their shape is known', async () => {
    const expected = await reference();
    const pool = new Pool();
    const session = await PooledSession.create(pool, modelFile, { activations: 'runtime', sessionOptions: { intraOpNumThreads: 1 } });
    for (let i = 0; i < 3; i++) {
      const before = pool.stats();
      const x = session.tensor('float32', dims);
      (x.data as Float32Array).set(inputValues(BATCH));
      const y = (await session.run({ x })).y;
      expect(y.dims).toEqual([BATCH, CLASSES]);
      expect(Float32Array.from(y.data as Float32Array)).toEqual(expected);
      const after = pool.stats();
      // The input always, the output from the second run on (the first run learns its shape).
      expect(after.allocs - before.allocs).toBe(i === 0 ? 1 : 2);
      expect(after.iterations - before.iterations).toBe(1);
      session.release(x, y);
      expect((x.data as Float32Array).length).toBe(0); // detached: nothing can touch the block any more
    }
    expect(pool.stats().liveBlocks).toBe(0);
    await session.close();
    pool.close();
  });

  it('inputs released right after run() is called, before it is awaited, do not change the result', async () => {
    const expected = await reference();
    const pool = new Pool();
    const session = await PooledSession.create(pool, modelFile, { activations: 'runtime' });
    for (let i = 0; i < 4; i++) {
      const x = session.tensor('float32', dims);
      (x.data as Float32Array).set(inputValues(BATCH));
      const pending = session.run({ x });
      session.release(x); // the run reads x later (onnxruntime-node starts it in setImmediate)
      expect(session.inFlight).toBe(1);
      // Whatever is allocated now must not get x's block: fill everything the pool hands out with garbage.
      const other = pool.float32(BATCH * CHANNELS * SIDE * SIDE).fill(1e30);
      const y = (await pending).y;
      expect(Float32Array.from(y.data as Float32Array)).toEqual(expected);
      pool.release(other);
      session.release(y);
    }
    await session.close();
    expect(pool.stats().liveBlocks).toBe(0);
    pool.close();
  });

  it('an input two runs in flight read, released at once, goes back only once both have settled', async () => {
    const expected = await reference();
    const pool = new Pool();
    const session = await PooledSession.create(pool, modelFile, { activations: 'runtime', poolOutputs: false });
    const x = session.tensor('float32', dims);
    (x.data as Float32Array).set(inputValues(BATCH));
    const runs = [session.run({ x }), session.run({ x })];
    session.release(x);
    expect(session.inFlight).toBe(2);
    expect(() => session.release(x)).toThrow(expect.objectContaining({ code: 'ERR_TP_DOUBLE_RELEASE' }));
    const other = pool.float32(BATCH * CHANNELS * SIDE * SIDE).fill(1e30); // never x's block while a run holds it
    const first = await Promise.race(runs);
    expect(Float32Array.from(first.y.data as Float32Array)).toEqual(expected);
    const [a, b] = await Promise.all(runs);
    expect(session.inFlight).toBe(0);
    expect(pool.stats().liveBlocks).toBe(1); // x went back before the runs' results reached us; `other` is live
    for (const out of [a, b]) expect(Float32Array.from(out.y.data as Float32Array)).toEqual(expected);
    session.release(a.y, b.y);
    pool.release(other);
    await session.close();
    pool.close();
  });

  it('an output shape that depends on the data: run again without pre-allocation, its input held until then', async () => {
    const pool = new Pool();
    // The first run of each fails on purpose (ONNX Runtime refuses the pre-allocated output): ONNX Runtime
    // logs that as an error (severity 3), which this test expects, so only fatal ones (4) are printed.
    const session = await PooledSession.create(pool, nonZeroModel(), { activations: 'runtime', sessionOptions: { logSeverityLevel: 4 } });
    const nonZero = async (values: number[]) => {
      const x = session.tensor('float32', [values.length]);
      (x.data as Float32Array).set(values);
      const pending = session.run({ x });
      session.release(x); // goes back only once the run, and the run again without outputs, have read it
      pool.float32(values.length).fill(0); // a block handed out meanwhile (x's, if it went back too early)
      const where = (await pending).where;
      const indices = Array.from(where.data as BigInt64Array, Number);
      session.release(where);
      return indices;
    };
    expect(await nonZero([0, 3, 0, 5])).toEqual([1, 3]); // learns output [1, 2] for float32[4]
    expect(await nonZero([7, 0, 0, 0])).toEqual([0]); // pre-allocated [1, 2] refused: run again
    expect(await nonZero([1, 1, 0, 1])).toEqual([0, 1, 3]); // no more pre-allocation for float32[4]
    await session.close();
    pool.close();
  });

  it("release() frees ONNX Runtime's own outputs, and run() frees the copy onnxruntime-node makes of a pre-allocated one", async () => {
    const expected = await reference();
    const pool = new Pool();
    const session = await PooledSession.create(pool, modelFile, { activations: 'runtime', sessionOptions: { intraOpNumThreads: 1 } });
    // What onnxruntime-node itself returns, before PooledSession puts the pooled outputs in its place.
    const returned: Record<string, ort.Tensor>[] = [];
    const ortRun = session.session.run.bind(session.session) as (...args: unknown[]) => Promise<Record<string, ort.Tensor>>;
    (session.session as unknown as { run: unknown }).run = async (...args: unknown[]) => {
      const result = await ortRun(...args);
      returned.push({ ...result });
      return result;
    };
    const x = session.tensor('float32', dims);
    (x.data as Float32Array).set(inputValues(BATCH));
    const first = (await session.run({ x })).y; // its shape not known yet: ONNX Runtime's own output
    expect(first).toBe(returned[0].y);
    expect(Float32Array.from(first.data as Float32Array)).toEqual(expected);
    session.release(first);
    expect((first.data as Float32Array).length).toBe(0); // detached, its memory freed
    expectCode(() => session.release(first), 'ERR_TP_DOUBLE_RELEASE');

    const second = (await session.run({ x })).y; // pre-allocated in the pool
    expect(second === returned[1].y).toBe(false); // onnxruntime-node handed back a copy of it...
    expect((returned[1].y.data as Float32Array).length).toBe(0); // ...which is freed already
    expect(Float32Array.from(second.data as Float32Array)).toEqual(expected);
    session.release(x, second);
    expect(pool.stats().liveBlocks).toBe(0);
    await session.close();
    pool.close();
  });

  it("ONNX Runtime's own allocations come from the lent pool: the same outputs, no page fault per run in the steady state", async () => {
    const expected = await reference();
    const pool = new Pool();
    const session = await PooledSession.create(pool, modelFile, { sessionOptions: { intraOpNumThreads: 1 } });
    expect(onnxRuntimeLibrary()).toMatch(/libonnxruntime\.so/);
    // Made once: a fresh 128 KiB Float32Array per run would be glibc's, and its pages faulted in each run
    // (160 faults per window on Node 24 in CI), which is the test's own memory, not the pool's.
    const values = inputValues(BATCH);
    const runOnce = async () => {
      const x = session.tensor('float32', dims);
      (x.data as Float32Array).set(values);
      const y = (await session.run({ x })).y;
      const out = Float32Array.from(y.data as Float32Array);
      session.release(x, y);
      return out;
    };
    for (let i = 0; i < 3; i++) expect(await runOnce()).toEqual(expected);
    const ortBefore = onnxRuntimeAllocatorStats();
    const poolBefore = pool.stats();
    const windows: number[] = [];
    for (let w = 0; w < 6; w++) {
      const f0 = faults().minor;
      for (let i = 0; i < 5; i++) await runOnce();
      windows.push(faults().minor - f0);
    }
    const ortAfter = onnxRuntimeAllocatorStats();
    const poolAfter = pool.stats();
    // ONNX Runtime's threads allocate from the pool too: it keeps no front cache, whose log would order the
    // inputs JS allocates after their allocations.
    expect(poolAfter.frontCache).toBeNull();
    // Every run: at least the block ONNX Runtime lays the activations out in (its memory pattern).
    expect(ortAfter.allocs - ortBefore.allocs).toBeGreaterThanOrEqual(15);
    expect(ortAfter.frees - ortBefore.frees).toBe(ortAfter.allocs - ortBefore.allocs);
    expect(ortAfter.heapFallbacks).toBe(0);
    expect(poolAfter.allocs - poolBefore.allocs).toBeGreaterThanOrEqual(ortAfter.allocs - ortBefore.allocs);
    expect(poolAfter.osFallbacks + poolAfter.osOversize).toBe(0);
    // Five runs write ~3 MiB (750 pages) of pool memory; if the pool faulted it in, every window would show
    // that many. The quietest window shows what is left: V8's own pages (0-12 seen on Node 20 and 24; V8
    // keeps compiling hot code into new pages), none of the pool's.
    expect(Math.min(...windows)).toBeLessThan(150);
    await session.close();
    stopLendingToOnnxRuntime();
    pool.close();
  });

  /** The child's JSON line, from a session under `tensorpool run` whose tensors come from `source`. */
  function runUnderPreload(source: 'pool' | 'process') {
    const inputFile = path.join(tmp, 'input.f32');
    fs.writeFileSync(inputFile, Buffer.from(inputValues(BATCH).buffer));
    const child = path.resolve(__dirname, 'onnxruntime/child.js');
    const r = spawnSync(
      process.execPath,
      [path.resolve(__dirname, '../dist/cli/main.js'), 'run', '--', process.execPath, child, modelFile, String(BATCH), '6', inputFile, source],
      { encoding: 'utf8', timeout: 120_000 },
    );
    expect(r.status, r.stderr).toBe(0);
    return JSON.parse(r.stdout.trim().split('\n').pop()!);
  }

  it("on processPool() the session's own tensors are malloc'd in the process pool too; misuse is refused", async () => {
    const out = runUnderPreload('process');
    const expected = await reference();
    for (const output of out.outputs) expect(Float32Array.from(output)).toEqual(expected);
    expect([out.tensorServed, out.tensorFromOs]).toEqual([1, 0]); // the 128 KiB input, from the process pool
    expect(out.processIterations).toBe(6);
    expect(out.poolStats).toEqual({ osFallbacks: 0, osOversize: 0 });
    expect(out.errors).toEqual(['ERR_TP_DOUBLE_RELEASE', 'ERR_TP_FOREIGN_BUFFER', 'ERR_TP_INVALID_ARGUMENT']);
    expect(Math.min(...out.faults.slice(2))).toBeLessThan(60);
  });

  it("under `tensorpool run` (arena off), the process pool serves ONNX Runtime's allocations through malloc", () => {
    const out = runUnderPreload('pool');
    return reference().then((expected) => {
      for (const output of out.outputs) expect(Float32Array.from(output)).toEqual(expected);
      expect(out.processIterations).toBe(6); // one mark per run on the pool that serves ONNX Runtime
      expect(out.processServed).toBeGreaterThanOrEqual(6); // ONNX Runtime's activations, each run
      expect(out.poolStats).toEqual({ osFallbacks: 0, osOversize: 0 });
      expect(Math.min(...out.faults.slice(2))).toBeLessThan(60); // a run writes ~150 pages of activations
    });
  });

  /** test/onnxruntime/dropped-inputs.js: 40 runs of batch 64, each input made in a 2 MiB Float32Array and dropped; `runArgs` null: without `tensorpool run`. */
  function droppedInputs(source: 'pool' | 'process', collectAfter: string, runArgs: string[] | null = null): { sums: number[]; buffers: number } {
    const child = [path.resolve(__dirname, 'onnxruntime/dropped-inputs.js'), modelFile, '40', '64', source, collectAfter];
    const command = runArgs === null ? child : [path.resolve(__dirname, '../dist/cli/main.js'), 'run', ...runArgs, '--', process.execPath, ...child];
    const env = { ...process.env };
    delete env.TENSORPOOL_COLLECT_AFTER;
    const r = spawnSync(process.execPath, command, { encoding: 'utf8', env, timeout: 120_000 });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stderr).not.toMatch(/warning/i);
    return JSON.parse(r.stdout.trim().split('\n').pop()!);
  }

  // V8 on its own collects dropped ArrayBuffers only after tens of MiB (31-36 MiB held here at most on Node
  // 20); before a run, a PooledSession has it collect once they have grown by options.collectAfter (4 MiB).
  it("frees the input arrays an app drops before a run (options.collectAfter, default 4 MiB): the outputs stay the same", () => {
    const collected = droppedInputs('pool', 'unset');
    const off = droppedInputs('pool', 'off');
    expect(collected.sums).toHaveLength(40);
    expect(collected.sums).toEqual(off.sums);
    expect(collected.buffers).toBeLessThan(16 * 2 ** 20);
    expect(off.buffers).toBeGreaterThan(2 * collected.buffers);
  });

  it("under `tensorpool run` a PooledSession collects as its option says, else as --collect-after does; the hook leaves its runs alone", () => {
    const byDefault = droppedInputs('process', 'unset', []);
    expect(byDefault.buffers).toBeLessThan(16 * 2 ** 20);
    // Off for this session: the hook, which collects before its own sessions' runs, does not before these.
    const off = droppedInputs('process', 'off', []);
    expect(off.buffers).toBeGreaterThan(2 * byDefault.buffers);
    expect(off.sums).toEqual(byDefault.sums);
    // Unset, the option is the process's setting; set, it wins over it.
    expect(droppedInputs('process', 'unset', ['--collect-after', 'off']).buffers).toBeGreaterThan(2 * byDefault.buffers);
    expect(droppedInputs('process', String(4 * 2 ** 20), ['--collect-after', 'off']).buffers).toBeLessThan(16 * 2 ** 20);
  });

  it('misuse gives clear errors: a released input, an output of the wrong shape, close() during a run', async () => {
    const pool = new Pool();
    const session = await PooledSession.create(pool, modelFile, { activations: 'runtime' });
    const x = session.tensor('float32', dims);
    (x.data as Float32Array).set(inputValues(BATCH));
    session.release(x);
    await expectRejection(session.run({ x }), 'ERR_TP_RELEASED', /input 'x' was released/);

    const x2 = session.tensor('float32', dims);
    (x2.data as Float32Array).set(inputValues(BATCH));
    session.release((await session.run({ x: x2 })).y); // learns y's shape for this input shape
    const wrong = session.tensor('float32', [BATCH + 1, CLASSES]);
    await expectRejection(session.run({ x: x2 }, { y: wrong }), 'ERR_TP_OUTPUT_SHAPE', /output 'y' is float32\[5,10\] but the model computes float32\[4,10\]/);
    const pending = session.run({ x: x2 });
    await expectRejection(session.close(), 'ERR_TP_BUSY', /still in flight/);
    session.release((await pending).y);
    session.release(x2, wrong);
    expectCode(() => session.release(x2), 'ERR_TP_DOUBLE_RELEASE');
    await session.close();
    await expectRejection(session.run({ x: x2 }), 'ERR_TP_CLOSED');
    expect(pool.stats().liveBlocks).toBe(0);
    pool.close();
  });

  it('validates its arguments', async () => {
    const pool = new Pool();
    expect(() => pooledTensor(pool, 'string' as never, [1])).toThrow(/type must be one of/);
    expect(() => pooledTensor(pool, 'float32', [1, -2])).toThrow(/dims must be an array of non-negative integers, but dims\[1\] is -2/);
    expect(() => pooledTensor(pool, 'float32', [1, [2]] as never)).toThrow(/dims\[1\] is an array/);
    expect(() => pooledTensor({} as Pool, 'float32', [1])).toThrow(/pool must be a Pool or processPool\(\), got an object$/);
    expect(() => pooledTensor(new ArrayBuffer(8) as never, 'float32', [1])).toThrow(/got an ArrayBuffer$/);
    expect(() => pooledTensor(new Map() as never, 'float32', [1])).toThrow(/got a Map$/);
    expect(() => lendToOnnxRuntime(pool, { ort: {} as never })).toThrow(/options.ort must be the onnxruntime-node module/);
    await expect(PooledSession.create(pool, modelFile, { activations: 'gpu' as never })).rejects.toThrow(/options.activations must be one of/);
    await expect(PooledSession.create(pool, modelFile, { pooling: true } as never)).rejects.toThrow(/has no option 'pooling'/);
    for (const wrong of [0, -1, 1.5, Infinity, '4M', 'on', null]) {
      await expect(PooledSession.create(pool, modelFile, { collectAfter: wrong as never })).rejects.toThrow(
        /^options.collectAfter must be a number of bytes \(a positive integer, such as 4194304\) or 'off', got /,
      );
    }
    process.env.TENSORPOOL_COLLECT_AFTER = '4M';
    try {
      await expect(PooledSession.create(pool, modelFile)).rejects.toThrow(/TENSORPOOL_COLLECT_AFTER=4M is not a number of bytes .*options.collectAfter is unset/);
      const explicit = await PooledSession.create(pool, modelFile, { activations: 'runtime', collectAfter: 'off' }); // the option wins
      await explicit.close();
    } finally {
      delete process.env.TENSORPOOL_COLLECT_AFTER;
    }
    const empty = pooledTensor(pool, 'float32', [0, 3]);
    expect(empty.size).toBe(0);
    pool.release(empty.data as Float32Array);
    pool.close();
    expectCode(() => lendToOnnxRuntime(pool), 'ERR_TP_CLOSED');
  });
});

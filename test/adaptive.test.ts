import { describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { OffsetPlan, Pool, Stream, readTrace, syntheticTrainingTrace, train, type PlanSwitch, type PoolStats, type Trace } from '../lib/index.js';
import { native } from '../lib/native.js';
import { toNativePlan } from '../lib/plan/plan-spec.js';
import { nativePoolOf } from '../lib/pool/pool.js';
import { repeatIteration, repeatIterations } from '../lib/trace/repeat.js';
import { expectCode, fillPattern, fixture, patternIntact, runTrace, traceFixture, underAsan } from './helpers.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-adaptive-'));

/** What each iteration cost, from the pool's counters around it. */
interface IterationCost {
  mode: string;
  generation: number;
  osFallbacks: number;
  unplannedBorrows: number;
}

/**
 * Stands for an iteration's compute, long enough for what adaptive mode does in the background: spins while
 * a worker thread trains the plan and a libuv thread builds its arena, until the next mark can move on.
 * Proves the work went on while this thread ran.
 */
function waitWhileSwitching(pool: Pool): void {
  const deadline = Date.now() + 30_000;
  for (let s = pool.stats().adaptive!; (s.mode === 'training' || s.mode === 'switching') && !s.ready; s = pool.stats().adaptive!) {
    if (Date.now() > deadline) throw new Error(`the background ${s.mode} never finished`);
  }
}

/** Runs `trace` through `pool`, marking its iterations; returns per completed iteration what it cost. */
function runIterations(pool: Pool, trace: Trace, live?: Map<number, ArrayBuffer>): { costs: IterationCost[]; live: Map<number, ArrayBuffer> } {
  const costs: IterationCost[] = [];
  let before: PoolStats = pool.stats();
  const onMark = () => {
    const now = pool.stats();
    costs.push({
      mode: now.adaptive!.mode,
      generation: now.generation,
      osFallbacks: now.osFallbacks + now.osOversize - before.osFallbacks - before.osOversize,
      unplannedBorrows: now.unplannedBorrows - before.unplannedBorrows,
    });
    before = now;
    waitWhileSwitching(pool);
  };
  const left = runTrace(pool, trace, { marks: true, onMark, patterns: true, live });
  pool.markIteration(); // the trace's last iteration ends
  onMark();
  return { costs, live: left };
}

/**
 * The start of a script for a child process: loads the compiled package (Pool, syntheticTrainingTrace) and
 * defines runIteration(pool, iteration), which replays one iteration of a trace through the pool and
 * releases what it left live.
 */
const childPrelude = `
  const { Pool, syntheticTrainingTrace } = require(${JSON.stringify(path.resolve(__dirname, '../dist/index.js'))});
  function runIteration(pool, iteration) {
    const live = new Map();
    for (let e = 0; e < iteration.eventCount; e++) {
      const b = iteration.eventBuffer[e];
      if (iteration.ops[e] === 0) live.set(b, pool.alloc(iteration.sizes[b]));
      else if (iteration.ops[e] === 1 && live.has(b)) { pool.release(live.get(b)); live.delete(b); }
    }
    for (const buffer of live.values()) pool.release(buffer);
  }`;

function releaseAll(pool: Pool, live: Map<number, ArrayBuffer>): void {
  for (const buffer of live.values()) pool.release(buffer);
  live.clear();
}

describe('adaptive pool: record, train, switch', () => {
  it.each([true, false])('a training loop takes no OS fallback after the warm-up, and blocks from before the switch stay valid (background %s)', (background) => {
    const trace = syntheticTrainingTrace({ layers: 24, iterations: 12, seed: 5, carryGradients: true });
    const switches: PlanSwitch[] = [];
    const pool = new Pool({ adaptive: { background, onSwitch: (event) => switches.push(event) }, prefault: false });
    const waited = background ? 2 : 0; // the iterations that ran while the plan was trained, then its arena built
    // Weights made before the first iteration: they live through the switch and go back afterwards.
    const weights = [3000, 70_000, 1 << 20, 5 << 20].map((bytes, i) => {
      const block = new Uint8Array(pool.alloc(bytes));
      fillPattern(block, 1000 + i);
      return block;
    });
    pool.markIteration(); // the set-up is the pool's first iteration: its warm-up
    const { costs, live } = runIterations(pool, trace);

    expect(switches).toHaveLength(1);
    const [first] = switches;
    // The loop's iterations 1 and 2 are the stable window (same sizes; the first frees no gradients, which
    // patterns ignore): the plan serves from the loop's iteration 3 on (5, trained and built in the background).
    expect(first).toMatchObject({ iteration: 3 + waited, waitedIterations: waited, background, trainedOn: background ? 'worker' : 'thread', reason: 'warm-up', trigger: null, generation: 2 });
    expect(first.readyMs).toBeGreaterThanOrEqual(first.switchMs);
    expect(first.trace.iterations).toBe(2);
    // One schedule per recorded iteration: the pool follows each in turn, then repeats the last.
    expect(first.plan.schedule!.sizes.length).toBe(first.trace.bufferCount);
    expect(Array.from(first.plan.schedule!.iterations!)).toEqual(first.trace.iterationFirstBuffers());
    expect(first.plan.training).toMatchObject({ adaptive: true, patterns: 1 });
    expect(costs.slice(0, 2 + waited).map((c) => c.mode)).toEqual(['recording', ...(background ? ['training', 'switching'] : []), 'planned']);
    for (const [i, cost] of costs.entries()) {
      if (i >= 2 + waited) expect(cost, `iteration ${i + 1}`).toMatchObject({ mode: 'planned', generation: 2, osFallbacks: 0 });
    }
    expect(pool.plan).toBe(first.plan);

    const s = pool.stats();
    expect(s.adaptive).toMatchObject({ mode: 'planned', iteration: 13, switches: 1, replans: 0, patterns: 1 });
    expect(s.arenas).toBe(2); // the first arena drains: the weights and nothing else
    weights.forEach((block, i) => {
      expect(patternIntact(block, 1000 + i)).toBe(true);
      pool.release(block);
    });
    releaseAll(pool, live);
    expect(pool.stats()).toMatchObject({ arenas: 1, liveBlocks: 0, generation: 2 });
    pool.close();
  });

  it('takes no page fault per iteration once the plan serves (native replay, iteration by iteration)', () => {
    const trace = syntheticTrainingTrace({ layers: 24, iterations: 8, seed: 9, carryGradients: true });
    const pool = new Pool({ adaptive: { background: false } });
    const replayer = new native.NativeReplayer(nativePoolOf(pool), trace.ops, trace.eventBuffer, trace.sizes, {
      touch: 'pages',
      iterationMarks: false,
    });
    const faults: number[] = [];
    for (let k = 1; k <= trace.iterations; k++) {
      const end = k < trace.iterations ? trace.iterationStarts[k] : trace.eventCount;
      faults.push(replayer.runUntil(end, false).minorFaults);
      pool.markIteration();
    }
    expect(pool.stats().adaptive).toMatchObject({ switches: 1, lastSwitch: { iteration: 3 } });
    // Under ASan the first touch of each new arena page also faults in its shadow memory: skip that iteration;
    // and the window's recorder, which goes on recording, takes fresh memory for its events from ASan's
    // allocator (which quarantines what was freed instead of reusing it): a few pages, not the tensors' (the
    // cold pool below faults over a hundred).
    const from = underAsan ? 4 : 3;
    if (underAsan) for (const f of faults.slice(from)) expect(f).toBeLessThanOrEqual(32);
    else expect(faults.slice(from)).toEqual(new Array(trace.iterations - from).fill(0));
    replayer.rewind(false);
    expect(pool.stats().liveBlocks).toBe(0);
    pool.close();

    // The meter does see faults here: the same first iteration on pages nobody pre-faulted.
    const cold = new Pool({ adaptive: true, prefault: false });
    const coldReplayer = new native.NativeReplayer(nativePoolOf(cold), trace.ops, trace.eventBuffer, trace.sizes, {
      touch: 'pages',
      iterationMarks: false,
    });
    expect(coldReplayer.runUntil(trace.iterationStarts[1], false).minorFaults).toBeGreaterThan(100);
    coldReplayer.rewind(false);
    cold.close();
  });

  it.each([true, false])('a new batch size: grown for at once, re-planned once it repeats, then served without fallbacks (background %s)', (background) => {
    const small = syntheticTrainingTrace({ layers: 24, iterations: 8, seed: 7 });
    const large = syntheticTrainingTrace({ layers: 24, iterations: 14, seed: 7, batchScale: 2 });
    // A cooldown of 3 ends before the first large iteration, with or without the background's two iterations.
    const pool = new Pool({ adaptive: { background, cooldownIterations: 3 }, prefault: false });
    const waited = background ? 2 : 0;
    const before = runIterations(pool, small);
    const after = runIterations(pool, large, before.live);
    const s = pool.stats().adaptive!;
    expect(s).toMatchObject({ switches: 2, replans: 1, mode: 'planned' });
    const [warmUp, drift] = s.history;
    expect(warmUp).toMatchObject({ reason: 'warm-up', iteration: 3 + waited });
    // The first large iteration leaves the plan (a pattern it was not trained on): the pool grows for it, the
    // OS serves nothing. The second one is a shape: the window (the small iterations and them) trains the next plan.
    expect(after.costs[0]).toMatchObject({ generation: 2, osFallbacks: 0 });
    expect(drift).toMatchObject({ reason: 'drift', iteration: 8 + 2 + waited, waitedIterations: waited, trigger: { iteration: 10, newPattern: true } });
    expect(s.lastSwitch!.plan.training).toMatchObject({ reason: 'drift', patterns: 2 });
    const replanned = after.costs.slice(2 + waited);
    expect(replanned.length).toBe(12 - waited);
    for (const cost of replanned) expect(cost).toMatchObject({ mode: 'planned', generation: 3, osFallbacks: 0 });
    releaseAll(pool, after.live);
    pool.close();
  });

  it('a cycle of patterns (input shapes): one switch once a shape repeats, to a plan serving each, in any order', () => {
    const shapes = [1, 2, 3].map((batchScale) => syntheticTrainingTrace({ layers: 8, iterations: 1, seed: 3, batchScale }));
    const pool = new Pool({ adaptive: { warmupIterations: 0, background: false }, prefault: false });
    for (let i = 0; i < 6; i++) {
      runTrace(pool, shapes[i % 3]);
      pool.markIteration();
    }
    const s = pool.stats().adaptive!;
    expect(s.switches).toBe(1);
    expect(s.lastSwitch).toMatchObject({ iteration: 4, reason: 'warm-up' }); // the first shape's second iteration
    expect(s.lastSwitch!.trace.iterations).toBe(4);
    expect(s.lastSwitch!.plan.training).toMatchObject({ patterns: 3 });
    const before = pool.stats();
    for (const k of [2, 0, 1, 1, 0, 2]) {
      runTrace(pool, shapes[k]);
      pool.markIteration();
    }
    const after = pool.stats();
    expect(after.osFallbacks).toBe(before.osFallbacks);
    expect(after.scheduleMisses).toBe(before.scheduleMisses);
    expect(pool.stats().adaptive!.switches).toBe(1);
    pool.close();
  });

  it('a stray allocation in some iterations does not keep a cycle from being a window (within 2%)', () => {
    const shapes = [1, 2, 3].map((batchScale) => syntheticTrainingTrace({ layers: 8, iterations: 1, seed: 3, batchScale }));
    expect(Math.min(...shapes.map((t) => t.bufferCount))).toBeGreaterThanOrEqual(50);
    const pool = new Pool({ adaptive: { warmupIterations: 0, background: false }, prefault: false });
    // Every iteration of the first three cycles asks for one buffer of a size no other asks for.
    for (let i = 0; i < 9; i++) {
      const stray = pool.alloc(65536 + 4096 * i);
      runTrace(pool, shapes[i % 3]);
      pool.release(stray);
      pool.markIteration();
    }
    const s = pool.stats().adaptive!;
    expect(s.switches).toBe(1);
    expect(s.lastSwitch!.plan.training).toMatchObject({ patterns: 3 });
    pool.close();
  });

  it('a real recording of ONNX Runtime cycling through six shapes: the same switches every run, then the cycle served as planned', () => {
    // Each run leaves the next run's input and its output live across the mark: the plan must wrap around.
    const recorded = readTrace(fixture('traces', 'ocr_det_infer', 'ocr-cycle.csv.gz'));
    const run = repeatIterations(recorded, recorded.iterations - 5, recorded.iterations, 8);
    const histories: unknown[] = [];
    for (let attempt = 0; attempt < 2; attempt++) {
      const pool = new Pool({ adaptive: { background: false }, prefault: false });
      const { costs, live } = runIterations(pool, run);
      const s = pool.stats().adaptive!;
      // The first plan once a shape repeats (the second iteration of the first shape recorded), then at most
      // one re-plan on the window, within two cycles of it.
      expect(s.history[0]).toMatchObject({ reason: 'warm-up', iteration: 8 });
      expect(s.switches).toBeLessThanOrEqual(2);
      const last = s.lastSwitch!.iteration;
      expect(last).toBeLessThanOrEqual(8 + 12);
      // costs[last - 1] is the iteration whose mark installed the plan: the plan serves every one after it.
      expect(costs.slice(last).every((c) => c.osFallbacks === 0 && c.unplannedBorrows === 0)).toBe(true);
      expect(costs.length - last).toBeGreaterThanOrEqual(24); // four cycles served by the plan, at least
      histories.push(s.history.map((h) => [h.iteration, h.reason, h.generation]));
      releaseAll(pool, live);
      pool.close();
    }
    expect(histories[1]).toEqual(histories[0]);
  });

  it('shapes that keep changing do not make it flap: each re-plan that follows another closely waits twice as long', () => {
    const shapes = Array.from({ length: 40 }, (_, k) => syntheticTrainingTrace({ layers: 4, iterations: 1, seed: 3, batchScale: 1 + k / 8 }));
    const pool = new Pool({ adaptive: { warmupIterations: 0, background: false, cooldownIterations: 2 }, prefault: false });
    for (const shape of shapes) {
      runTrace(pool, shape);
      pool.markIteration();
    }
    const s = pool.stats().adaptive!;
    // Every iteration is a new shape: the first plan after maxPatterns (8) of them; a shape re-plans once one
    // near it (within 2%) has come twice, and a re-plan that follows another closely (within twice the
    // cooldown and 4) waits twice as long as that one did.
    const at = s.history.map((h) => h.iteration);
    expect(at[0]).toBe(8);
    expect(s.switches).toBeLessThanOrEqual(5);
    for (let i = 2; i < at.length; i++) {
      const previous = at[i - 1] - at[i - 2];
      if (previous <= 2 * 2 + 4) expect(at[i] - at[i - 1], `switch ${i + 1}`).toBeGreaterThan(previous);
    }
    pool.close();
  });

  it('a cycle in which one shape drifts every time it comes, between shapes served as planned: a re-plan for it', () => {
    // The plan serves the 64 KiB and 128 KiB iterations; the 256 KiB one goes to the OS each time it comes.
    const plan = { interval: 4096, classes: [{ size: 65536, blocks: 8 }, { size: 131072, blocks: 8 }] };
    const pool = new Pool({ plan, adaptive: { warmupIterations: 0, background: false, cooldownIterations: 0 }, prefault: false });
    const iteration = (bytes: number) => {
      const held = Array.from({ length: 8 }, () => pool.alloc(bytes));
      for (const b of held) pool.release(b);
      pool.markIteration();
    };
    for (let cycle = 0; cycle < 3; cycle++) for (const bytes of [65536, 131072, 262144]) iteration(bytes);
    const s = pool.stats().adaptive!;
    expect(s.switches).toBe(1);
    expect(s.lastSwitch).toMatchObject({ reason: 'drift', iteration: 6 }); // the 256 KiB shape's second time
    const before = pool.stats();
    for (const bytes of [65536, 131072, 262144]) iteration(bytes);
    expect(pool.stats().osFallbacks).toBe(before.osFallbacks);
    pool.close();
  });

  it('starts planned from a given plan and keeps it while the run matches', () => {
    const trace = syntheticTrainingTrace({ layers: 16, iterations: 6, seed: 2 });
    const plan = train(trace, { iteration: 2 });
    const pool = new Pool({ plan, adaptive: true, prefault: false });
    const { costs, live } = runIterations(pool, trace);
    expect(costs.map((c) => c.mode)).toEqual(new Array(6).fill('planned'));
    expect(costs.every((c) => c.osFallbacks === 0)).toBe(true);
    expect(pool.stats().adaptive!.switches).toBe(0);
    expect(pool.plan).toEqual(plan);
    releaseAll(pool, live);
    pool.close();
  });

  it('switches on the shared traces with no OS fallback after the switch', () => {
    for (const name of ['resnet18_train', 'transformer_train']) {
      const trace = repeatIteration(readTrace(traceFixture(name, 'trace.csv.gz')), 2, 6);
      const pool = new Pool({ adaptive: true, prefault: false });
      const { costs, live } = runIterations(pool, trace);
      expect(pool.stats().adaptive!.switches, name).toBe(1);
      for (const cost of costs.slice(4)) expect(cost, name).toMatchObject({ mode: 'planned', osFallbacks: 0 });
      releaseAll(pool, live);
      pool.close();
    }
  });

  it('trains on a worker thread; closing the pool while it trains stops the worker and switches to nothing', () => {
    const trace = syntheticTrainingTrace({ layers: 16, iterations: 4, seed: 4 });
    const pool = new Pool({ adaptive: true, prefault: false });
    const modes: string[] = [];
    for (let k = 1; k <= 4 && pool.stats().adaptive!.mode !== 'training'; k++) {
      runTrace(pool, trace.iteration(k));
      pool.markIteration();
      modes.push(pool.stats().adaptive!.mode);
    }
    expect(modes).toEqual(['recording', 'recording', 'training']);
    pool.close();
    expect(pool.stats().adaptive).toMatchObject({ mode: 'unplanned', switches: 0, abandoned: 1, ready: false });
    expect(pool.stats().adaptive!.lastError).toBe('the pool closed while the plan was trained');
    expect(pool.stats().generation).toBe(1);
  });

  it("trains on the pool's own thread where Node's permission model refuses worker_threads", () => {
    // A child under the permission model (reading files and loading the addon allowed, workers not).
    const permission = Number(process.versions.node.split('.')[0]) >= 22 ? '--permission' : '--experimental-permission';
    const script = `${childPrelude}
      const trace = syntheticTrainingTrace({ layers: 8, iterations: 5, seed: 1 });
      const pool = new Pool({ adaptive: true, prefault: false });
      for (let k = 1; k <= trace.iterations; k++) {
        runIteration(pool, trace.iteration(k));
        pool.markIteration();
        for (let s = pool.stats().adaptive; s.mode === 'switching' && !s.ready; s = pool.stats().adaptive);
      }
      const { switches, history, lastError } = pool.stats().adaptive;
      console.log(JSON.stringify({ switches, trainedOn: history.map((h) => h.trainedOn), lastError }));`;
    const r = spawnSync(process.execPath, [permission, '--allow-fs-read=*', '--allow-addons', '-e', script], { encoding: 'utf8', timeout: 60_000 });
    expect(r.status, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout.trim().split('\n').pop()!)).toEqual({ switches: 1, trainedOn: ['thread'], lastError: null });
  });

  it('a mark never waits for the background: while the arena cannot be built, marks go on with the serving classes; the first mark after it is built switches', () => {
    // A child whose only libuv thread is held by an open() of a FIFO that no one writes yet: the arena,
    // built on that pool of threads, waits behind it for as long as the child chooses.
    const dir = fs.mkdtempSync(path.join(tmp, 'held-'));
    const fifo = path.join(dir, 'fifo');
    expect(spawnSync('mkfifo', [fifo]).status).toBe(0);
    const script = `${childPrelude}
      const fs = require('node:fs');
      const trace = syntheticTrainingTrace({ layers: 8, iterations: 12, seed: 2 });
      const switches = [];
      const pool = new Pool({ adaptive: { onSwitch: (e) => switches.push({ iteration: e.iteration, waitedIterations: e.waitedIterations }) }, prefault: false });
      let k = 0;
      const step = () => {
        runIteration(pool, trace.iteration(++k));
        pool.markIteration();
        const s = pool.stats();
        return { mode: s.adaptive.mode, generation: s.generation };
      };
      (async () => {
        const modes = [];
        while (k < 4 && modes[modes.length - 1] !== 'training') modes.push(step().mode);
        await pool.adaptiveReady(); // the worker has trained the plan
        fs.open(${JSON.stringify(fifo)}, 'r', (error, fd) => { if (!error) fs.closeSync(fd); });
        const held = [];
        for (let i = 0; i < 4; i++) held.push(step()); // the first takes the plan; its arena cannot be built
        fs.closeSync(fs.openSync(${JSON.stringify(fifo)}, 'w')); // lets the libuv thread go
        await pool.adaptiveReady(); // the arena is built
        const after = step();
        console.log(JSON.stringify({ modes, held, after, switches }));
      })();`;
    const r = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8', timeout: 60_000, env: { ...process.env, UV_THREADPOOL_SIZE: '1' } });
    fs.rmSync(dir, { recursive: true, force: true });
    expect(r.status, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout.trim().split('\n').pop()!);
    expect(out.modes).toEqual(['recording', 'recording', 'training']);
    expect(out.held).toEqual(new Array(4).fill({ mode: 'switching', generation: 1 }));
    expect(out.after).toEqual({ mode: 'planned', generation: 2 });
    expect(out.switches).toEqual([{ iteration: 8, waitedIterations: 5 }]);
  });

  it('a loop that awaits adaptiveReady() before each mark switches at the same iteration on every run: the second mark after the one that decided', async () => {
    const trace = syntheticTrainingTrace({ layers: 24, iterations: 8, seed: 5 });
    for (let run = 0; run < 2; run++) {
      const pool = new Pool({ adaptive: true, prefault: false });
      const modes: string[] = [];
      for (let k = 1; k <= trace.iterations; k++) {
        await pool.adaptiveReady();
        releaseAll(pool, runTrace(pool, trace.iteration(k)));
        pool.markIteration();
        modes.push(pool.stats().adaptive!.mode);
      }
      expect(modes).toEqual(['recording', 'recording', 'training', 'switching', 'planned', 'planned', 'planned', 'planned']);
      expect(pool.stats().adaptive).toMatchObject({ switches: 1, lastSwitch: { iteration: 5, waitedIterations: 2, trainedOn: 'worker', background: true } });
      pool.close();
    }
    // Nothing to wait for: a pool without adaptive mode, one that is planned.
    const plain = new Pool();
    await expect(plain.adaptiveReady()).resolves.toBeUndefined();
    plain.close();
  });

  it('builds a switch off the JS thread: installed by the next mark, replaced by a newer one, dropped by close', async () => {
    const plan = toNativePlan(train(syntheticTrainingTrace({ layers: 16, iterations: 2, seed: 8 }), { iteration: 2 }));
    const pool = new Pool();
    const np = nativePoolOf(pool);
    const reserved = pool.stats().reservedBytes;
    const first = await np.prepareSwitch(plan);
    expect(pool.stats()).toMatchObject({ generation: 1, preparedGeneration: first, switches: 0, arenas: 1 });
    expect(pool.stats().reservedBytes).toBeGreaterThan(reserved);
    const second = await np.prepareSwitch(plan); // replaces the first, whose arena goes
    expect(second).toBeGreaterThan(first);
    const block = pool.alloc(1000); // the first generation still serves
    expect(np.markIteration().installed).toBe(second);
    expect(pool.stats()).toMatchObject({ generation: second, preparedGeneration: 0, switches: 1, arenas: 2 });
    expect(np.markIteration().installed).toBe(0);
    pool.release(block);
    expect(pool.stats().arenas).toBe(1);

    // A bad plan rejects and changes nothing.
    const bad = { interval: 4096, sizes: Float64Array.of(5000), blocks: Float64Array.of(1) };
    await expect(np.prepareSwitch(bad)).rejects.toMatchObject({ code: 'ERR_TP_POOL_CREATE' });
    expect(pool.stats()).toMatchObject({ generation: second, preparedGeneration: 0, switches: 1 });

    // Closed while it is built: the arena is dropped either way, never installed.
    const late = np.prepareSwitch(plan);
    pool.close();
    const outcome = await late.then(() => 'prepared first', (error: Error) => error.message);
    expect(outcome).toMatch(/^(prepared first|the pool is closed|the pool was closed while the switch was prepared)$/);
    expect(pool.stats()).toMatchObject({ generation: second, preparedGeneration: 0, reservedBytes: 0, closed: true });
  });

  it('a switch never holds the retired free blocks and the new arena at once: the peak stays near the old footprint', () => {
    // In a fresh process, so that VmHWM (the peak resident set) is this switch's. The default classes hold
    // 256 MiB of free blocks (written, so resident); the plan's arena is 256 MiB. Built pre-faulted beside
    // them, the process would peak ~256 MiB higher; given back first, then faulted in, it stays level.
    const script = `
      const fs = require('node:fs');
      const { Pool, faults } = require(${JSON.stringify(path.resolve(__dirname, '../dist/index.js'))});
      const { nativePoolOf } = require(${JSON.stringify(path.resolve(__dirname, '../dist/pool/pool.js'))});
      const status = (key) => 1024 * parseInt(fs.readFileSync('/proc/self/status', 'utf8').split(key + ':')[1], 10);
      const MiB = 2 ** 20, size = 32 * MiB, blocks = 8;
      const pool = new Pool({ frontCache: false }); // the default classes, growing
      const np = nativePoolOf(pool);
      const held = [];
      for (let i = 0; i < blocks; i++) { const b = pool.alloc(size); new Uint8Array(b).fill(1); held.push(b); }
      for (const b of held) pool.release(b);
      const before = status('VmRSS');
      (async () => {
        await np.prepareSwitch({ interval: MiB, sizes: Float64Array.of(size), blocks: Float64Array.of(blocks) });
        const prepared = status('VmRSS');
        np.markIteration(); // installs it; the retired free pages go back, then the new arena is faulted in
        const deadline = Date.now() + 30000;
        while (pool.stats().committedBytes < blocks * size && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
        const after = status('VmRSS');
        const peak = status('VmHWM');
        const f0 = faults().minor;
        for (let i = 0; i < blocks; i++) new Uint8Array(pool.alloc(size)).fill(2);
        const s = pool.stats();
        console.log(JSON.stringify({ before, prepared, after, peak, faults: faults().minor - f0, osFallbacks: s.osFallbacks, generation: s.generation }));
      })();`;
    const r = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8', timeout: 60_000 });
    expect(r.status, r.stderr).toBe(0);
    const m = JSON.parse(r.stdout.trim().split('\n').pop()!) as Record<string, number>;
    const MiB = 2 ** 20;
    expect(m.generation).toBe(2);
    expect(m.prepared - m.before).toBeLessThan(16 * MiB); // building the plan's arena made nothing resident
    expect(m.peak - m.before).toBeLessThan(32 * MiB); // nor did the switch, at any moment
    expect(Math.abs(m.after - m.before)).toBeLessThan(32 * MiB); // the new arena is resident in the old one's place
    // ... pre-faulted: serving it faults nothing in (65,536 pages; under ASan its shadow of them faults in).
    if (!underAsan) expect(m.faults).toBeLessThan(1024);
    expect(m.osFallbacks).toBe(0);
  });

  it('a growing pool grows its new plan after a switch: requests outside the plan never go to the OS', () => {
    const plan = toNativePlan({ interval: 4096, classes: [{ size: 1 << 20, blocks: 2 }] });
    const growing = new Pool({ frontCache: false }); // the default classes, growing (the process pool's)
    const fixed = new Pool({ frontCache: false, plan: { interval: 4096, classes: [{ size: 4096, blocks: 1 }] }, grow: false });
    for (const pool of [growing, fixed]) {
      nativePoolOf(pool).switchPlan(plan);
      const held = [0, 1, 2, 3].map(() => pool.alloc(1 << 20)); // two more than planned
      held.push(pool.alloc(3 << 20)); // larger than every class of the plan
      for (const b of held) {
        new Uint8Array(b).fill(7);
        pool.release(b);
      }
    }
    expect(growing.stats()).toMatchObject({ generation: 2, osFallbacks: 0, osOversize: 0, grown: 3 }); // 2 x 1 MiB, 3 MiB
    expect(fixed.stats()).toMatchObject({ generation: 2, osFallbacks: 2, osOversize: 1 }); // a pool that does not grow
    growing.close();
    fixed.close();
  });

  it("a growing plan serves a request whose block is still held by growing its class, not with a block planned for a tensor many times larger", () => {
    // An input a garbage collector frees late holds the planned block of its size; the next input must not
    // take the block planned for a tensor five times larger, whose request would then grow (and fault in) one.
    const small = 150 * 4096;
    const large = 800 * 4096;
    const pool = new Pool({ frontCache: false, plan: { interval: 4096, classes: [{ size: small, blocks: 1 }, { size: large, blocks: 1 }] }, grow: true });
    const held = pool.alloc(small);
    const next = pool.alloc(small);
    const tensor = pool.alloc(large);
    const classes = pool.stats().classes;
    expect(classes.find((c) => c.size === large)).toMatchObject({ hits: 1, lent: 0, grown: 0 });
    expect(classes.find((c) => c.size === small)).toMatchObject({ hits: 2, grown: 1 });
    expect(pool.stats()).toMatchObject({ osFallbacks: 0, grown: 1 });
    for (const b of [held, next, tensor]) pool.release(b);
    pool.close();
  });

  it('a steady loop whose inputs a garbage collector frees late, by a varying number of iterations: one plan, no re-plan, no OS fallback', () => {
    // Each iteration: an input the program drops (freed by "the collector" 1 to 5 iterations later, in an
    // irregular order), two intermediates and an output. The same pattern every iteration; only how many
    // inputs are still live varies. The pool grows a block when more are live than ever before, and that
    // block serves the next time: nothing for a re-plan to fix.
    const pool = new Pool({ adaptive: { background: false } });
    // Iterations after which the collector runs: every one or two while the plan is learnt, then gaps of up to
    // seven (more inputs live than the plan was trained with, for several iterations in a row).
    const gaps = [1, 1, 2, 1, 1, 2, 1, 5, 1, 7, 2, 6, 1, 3, 7, 1, 4, 6, 2, 5];
    const collections = new Set(gaps.map((_, k) => gaps.slice(0, k + 1).reduce((x, y) => x + y, 0)));
    const pending: ArrayBuffer[] = [];
    const osBefore: number[] = [];
    for (let i = 1; i <= 75; i++) {
      pending.push(pool.alloc(600_000));
      const a = pool.alloc(1 << 20);
      const b = pool.alloc(2 << 20);
      pool.release(a);
      const out = pool.alloc(100_000);
      pool.release(b);
      pool.release(out);
      if (collections.has(i)) for (const input of pending.splice(0)) pool.release(input);
      pool.markIteration();
      osBefore.push(pool.stats().osFallbacks + pool.stats().osOversize);
    }
    const s = pool.stats().adaptive!;
    expect(s.history.map((h) => h.reason)).toEqual(['warm-up']);
    expect(s.replans).toBe(0);
    expect(osBefore[osBefore.length - 1]).toBe(osBefore[s.history[0].iteration - 1]); // none after the switch
    for (const input of pending) pool.release(input);
    pool.close();
  });

  it('validates its options', () => {
    expectCode(() => new Pool({ adaptive: { stableIterations: 1 } }), 'ERR_TP_INVALID_ARGUMENT');
    expectCode(() => new Pool({ adaptive: { replanThreshold: 2 } }), 'ERR_TP_INVALID_ARGUMENT');
    expectCode(() => new Pool({ adaptive: { warmupIterations: -1 } }), 'ERR_TP_INVALID_ARGUMENT');
    expectCode(() => new Pool({ adaptive: { recordLimit: 1 } }), 'ERR_TP_INVALID_ARGUMENT');
    expectCode(() => new Pool({ adaptive: { onSwitch: 'yes' as never } }), 'ERR_TP_INVALID_ARGUMENT');
    expectCode(() => new Pool({ adaptive: { train: { iteration: 2 } as never } }), 'ERR_TP_INVALID_ARGUMENT');
    expectCode(() => new Pool({ adaptive: { warmup: 1 } as never }), 'ERR_TP_INVALID_ARGUMENT');
    expect(() => new Pool({ adaptive: { stableIterations: 1 } })).toThrow(/options\.adaptive\.stableIterations must be between 2 and/);
    const offsets = OffsetPlan.fromTrace(syntheticTrainingTrace({ layers: 4, iterations: 1 }));
    expect(() => new Pool({ adaptive: true, offsets })).toThrow(/cannot be combined/);
    const pool = new Pool({ adaptive: true });
    expectCode(() => pool.record(), 'ERR_TP_UNSUPPORTED');
    expect(new Pool().stats().adaptive).toBeNull();
  });
});

describe('recording: pool.record() and stopRecording()', () => {
  it('a shared trace replayed through a recording pool comes back event for event and trains the same plan', () => {
    for (const name of ['resnet18_train', 'transformer_train']) {
      const external = readTrace(traceFixture(name, 'trace.csv.gz'));
      const pool = new Pool({ prefault: false });
      pool.record();
      const live = runTrace(pool, external, { marks: true });
      const recorded = pool.stopRecording(`${name} recorded`);
      releaseAll(pool, live);
      expect(recorded.format).toBe('recorded');
      expect(recorded.toCsv(), name).toBe(external.toCsv());
      expect(recorded.iterations).toBe(external.iterations);
      for (const iteration of [1, 2]) {
        const fromRecording = train(recorded, { iteration, order: 'auto' });
        const fromFile = train(external, { iteration, order: 'auto' });
        expect(fromRecording.classes, `${name} #${iteration}`).toEqual(fromFile.classes);
        expect(Array.from(fromRecording.schedule!.classes)).toEqual(Array.from(fromFile.schedule!.classes));
      }
      pool.close();
    }
  });

  it('leaves out releases of blocks from before, names streams, and round-trips through CSV', () => {
    const pool = new Pool({ prefault: false });
    const early = pool.alloc(100);
    pool.record();
    const a = pool.alloc(5000);
    const b = pool.alloc(70_000);
    pool.release(early);
    pool.markIteration();
    const stream = new Stream();
    pool.release(a, { stream });
    const trace = pool.stopRecording();
    pool.alloc(64); // after the recording: not in it
    expect(trace.anomalies.freeOfUnknown).toBe(1);
    expect(Array.from(trace.sizes)).toEqual([5000, 70_000]);
    expect(trace.iterations).toBe(2);
    expect(trace.neverFreed).toBe(1);
    expect(trace.toCsv()).toBe('op,id,size,stream\na,0,5000,0\na,1,70000,0\ni,,,\nf,0,,1\n');
    const file = path.join(tmp, 'recorded.csv');
    trace.writeCsv(file);
    expect(readTrace(file).toCsv()).toBe(trace.toCsv());
    stream.close();
    pool.release(b);
  });

  it('stops at its limit and says so; misuse is a clear error', () => {
    const pool = new Pool({ prefault: false });
    expectCode(() => pool.stopRecording(), 'ERR_TP_UNSUPPORTED');
    expectCode(() => pool.record({ maxEvents: 0 }), 'ERR_TP_INVALID_ARGUMENT');
    expectCode(() => pool.record({ max: 3 } as never), 'ERR_TP_INVALID_ARGUMENT');
    pool.record({ maxEvents: 3 });
    expectCode(() => pool.record(), 'ERR_TP_UNSUPPORTED');
    for (let i = 0; i < 4; i++) pool.release(pool.alloc(4096));
    expect(pool.stats().recording).toEqual({ on: false, events: 3, truncated: true });
    const trace = pool.stopRecording();
    expect(trace.eventCount).toBe(3);
    expect(pool.stats().recording).toEqual({ on: false, events: 0, truncated: false });
    pool.record();
    pool.release(pool.alloc(64));
    expect(pool.stopRecording().eventCount).toBe(2);
  });
});

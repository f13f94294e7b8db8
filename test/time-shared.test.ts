// Time-shared blocks (issue 13): plans whose blocks share memory when their uses never overlap in time,
// one plan for several input shapes, and the pool keeping every live block to itself.
import { describe, expect, it } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { Plan, Pool, readTrace, repeatIteration, syntheticTrainingTrace, train, type Trace } from '../lib/index.js';
import { keepsChanging, outlivesIteration, repeatingPeriod, repeatIterations, wrapAroundConflicts } from '../lib/trace/repeat.js';
import { TraceBuilder } from '../lib/trace/trace.js';
import { trainTimeSharedEach } from '../lib/plan/train.js';
import { replayThroughSpans, servingPart } from '../lib/plan/spans.js';
import { fixture, runTrace, seededRandom, traceFixture } from './helpers.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-shared-'));
const SHAPES = ['320x320', '480x800', '640x640', '640x960', '736x1280', '960x736'];
const ocr = SHAPES.map((shape) => readTrace(fixture('traces', 'ocr_det_infer', `ocr-${shape}.csv.gz`)));
const largestBound = Math.max(...ocr.map((t) => t.lowerBound()));

/** Runs a trace through the pool, marking its iterations, with every block's contents checked. */
function serve(pool: Pool, trace: Trace) {
  const before = pool.stats();
  const live = runTrace(pool, trace, { marks: true, patterns: true });
  for (const buffer of live.values()) pool.release(buffer);
  pool.markIteration();
  const after = pool.stats();
  return {
    os: after.osFallbacks + after.osOversize - before.osFallbacks - before.osOversize,
    scheduleHits: after.scheduleHits - before.scheduleHits,
    busy: after.busySkips - before.busySkips,
  };
}

describe('time-shared blocks on inference traces', () => {
  it('trains each shape to the lower bound, where S0 alone needs 1.2x, and serves it exactly', () => {
    for (const trace of ocr) {
      const s0 = train(trace, { order: 'auto', share: false });
      const plan = train(trace, { order: 'auto', share: 'auto' });
      expect(plan.training.order).toBe('time-shared');
      expect(plan.layout).toBeDefined();
      expect(plan.ratio!).toBeLessThanOrEqual(1.1);
      expect(s0.ratio!).toBeGreaterThan(1.15);
      const pool = new Pool({ plan, prefault: false });
      for (let rep = 0; rep < 2; rep++) expect(serve(pool, trace)).toEqual({ os: 0, scheduleHits: trace.summary().allocs, busy: 0 });
      pool.close();
    }
  });

  it('one plan for six shapes: within 1.15x of the largest shape’s bound, and every shape served in any order', () => {
    const plan = train(ocr, { order: 'auto', share: 'auto' });
    expect(plan.lowerBound).toBe(largestBound);
    expect(plan.arenaBytes / largestBound).toBeLessThanOrEqual(1.15);
    expect(plan.schedule!.iterations!.length).toBeGreaterThanOrEqual(SHAPES.length);
    expect(plan.training.traces).toHaveLength(SHAPES.length);
    const pool = new Pool({ plan, prefault: false });
    const random = seededRandom(5);
    for (let round = 0; round < 18; round++) {
      const trace = ocr[Math.floor(random() * ocr.length)];
      expect(serve(pool, trace)).toEqual({ os: 0, scheduleHits: trace.summary().allocs, busy: 0 });
    }
    pool.close();
  });

  it('departures from the plan (shapes it never saw, extra buffers held across runs) never share live memory', () => {
    const plan = train(ocr.slice(0, 3), { order: 'auto', share: true });
    // A small reservation: departures outgrow it and land on the layout's blocks, whose sharers must be free.
    const pool = new Pool({ plan, prefault: false, grow: true, growReserve: 16 * 2 ** 20 });
    const random = seededRandom(9);
    const live: ArrayBuffer[] = [];
    // Shapes the plan never saw, with extra buffers held across them: runTrace checks every block's
    // pattern at release, so memory handed to two live blocks would fail here.
    for (const trace of [...ocr.slice(3), ocr[0], ocr[4]]) {
      for (let k = 0; k < 3; k++) live.push(pool.alloc(1 + Math.floor(random() * 8e6)));
      serve(pool, trace);
    }
    for (const buffer of live) pool.release(buffer);
    const s = pool.stats();
    expect(s.liveBlocks).toBe(0);
    expect(s.busySkips).toBeGreaterThan(0);
    pool.close();
  });

  it('a run of sizes its plan never saw reuses the blocks it grew: growth stays within a multiple of the peak live bytes', () => {
    const plan = train(ocr[0], { order: 'auto', share: true });
    const pool = new Pool({ plan, prefault: false, grow: true, growReserve: 4 * 2 ** 30 });
    const random = seededRandom(34);
    const live: ArrayBuffer[] = [];
    let allocs = 0;
    for (let step = 0; step < 4000; step++) {
      if (live.length >= 64 || (live.length > 0 && random() < 0.5)) {
        pool.release(live.splice(Math.floor(random() * live.length), 1)[0]);
      } else {
        live.push(pool.alloc(1 + Math.floor(random() * 4e6)));
        allocs++;
      }
    }
    for (const buffer of live) pool.release(buffer);
    const s = pool.stats();
    expect(s.liveBlocks).toBe(0);
    // Before, a request of no class's own size grew a new block every time (10.4 GB under a random program).
    expect(s.grown).toBeLessThan(allocs / 4);
    expect(s.arenaBytes).toBeLessThanOrEqual(plan.arenaBytes + 3 * s.peakBytesLive + 64 * 2 ** 20);
    pool.close();
  });

  it('a start-up in another order follows its own schedule, not a later one that opens with the same size', () => {
    // Recorded: a start-up that keeps three small buffers (16, 64, 64 bytes), then iterations of two
    // patterns in turn; the second opens with a small output of 64 bytes.
    const KiB = 1024;
    const recorded = new TraceBuilder();
    for (const size of [16, 64, 64]) recorded.alloc(size, 0);
    for (let i = 0; i < 4; i++) {
      recorded.mark();
      const output = i % 2 === 1 ? recorded.alloc(64, 0) : -1;
      const a = recorded.alloc((i % 2 === 0 ? 1024 : 2048) * KiB, 0);
      const b = recorded.alloc(512 * KiB, 0);
      recorded.free(a, 0);
      recorded.free(b, 0);
      if (output >= 0) recorded.free(output, 0);
    }
    const plan = train(recorded.build('start-up', 'tensorpool-csv'), { share: true });
    expect(plan.layout).toBeDefined();
    const pool = new Pool({ plan, prefault: false });
    // The same start-up, its sizes in another order (a runtime creating a session in another process).
    const kept = [64, 64, 16].map((size) => pool.alloc(size));
    expect(pool.stats()).toMatchObject({ scheduleHits: 3, scheduleMisses: 0 });
    for (let i = 0; i < 6; i++) {
      pool.markIteration();
      const output = i % 2 === 1 ? pool.alloc(64) : null;
      const a = pool.alloc((i % 2 === 0 ? 1024 : 2048) * KiB);
      const b = pool.alloc(512 * KiB);
      for (const buffer of [a, b, output]) if (buffer) pool.release(buffer);
    }
    expect(pool.stats()).toMatchObject({ scheduleMisses: 0, busySkips: 0, osFallbacks: 0, grown: 0 });
    for (const buffer of kept) pool.release(buffer);
    pool.close();
  });

  it('a start-up whose order changed costs a grown block once, not an OS fallback per iteration', () => {
    // Recorded: a weight W, then a scratch buffer S of W's size freed at once; then iterations of one
    // buffer B that the layout puts over S's memory. A run that asks for the scratch buffer first gives the
    // weight S's entry (same size), and the weight then keeps B's scheduled block busy for good.
    const KiB = 1024;
    const recorded = new TraceBuilder();
    recorded.alloc(512 * KiB, 0);
    recorded.free(recorded.alloc(512 * KiB, 0), 0);
    for (let i = 0; i < 4; i++) {
      recorded.mark();
      recorded.free(recorded.alloc(1024 * KiB, 0), 0);
    }
    const plan = train(recorded.build('start-up', 'tensorpool-csv'), { share: true });
    expect(plan.arenaBytes).toBeLessThan(2 * 1024 * KiB); // S and B share memory: less than W + S + B

    const run = (options: { grow?: boolean }) => {
      const pool = new Pool({ plan, prefault: false, ...options });
      const scratch = pool.alloc(512 * KiB);
      const weight = pool.alloc(512 * KiB);
      pool.release(scratch);
      const perIteration = [];
      for (let i = 0; i < 4; i++) {
        pool.markIteration();
        const before = pool.stats();
        pool.release(pool.alloc(1024 * KiB));
        const after = pool.stats();
        perIteration.push({ os: after.osFallbacks - before.osFallbacks, grown: after.grown - before.grown });
      }
      pool.release(weight);
      pool.close();
      return perIteration;
    };
    expect(run({ grow: false })).toEqual(Array(4).fill({ os: 1, grown: 0 }));
    expect(run({})).toEqual([{ os: 0, grown: 1 }, ...Array(3).fill({ os: 0, grown: 0 })]);
  });
});

describe('time-shared blocks on training traces', () => {
  it('never a larger arena than S0 on any input, and kept only where it serves the steady state', () => {
    const inputs: Trace[] = [
      readTrace(traceFixture('resnet18_train', 'trace.csv.gz')),
      readTrace(traceFixture('transformer_train', 'trace.json.gz')),
      syntheticTrainingTrace({ layers: 30, iterations: 4, seed: 3 }),
      ...ocr.slice(0, 2),
    ];
    for (const trace of inputs) {
      const s0 = train(trace, { order: 'auto', share: false });
      const plan = train(trace, { order: 'auto', share: 'auto' });
      expect(plan.arenaBytes).toBeLessThanOrEqual(s0.arenaBytes);
      // The trace, then its last iteration repeated as a loop repeats it: every allocation as scheduled.
      const pool = new Pool({ plan, prefault: false });
      const run = repeatIteration(trace, trace.iterations, 3);
      const stats = serve(pool, run);
      expect(stats.os).toBe(0);
      if (plan.layout) expect([trace.name, stats.scheduleHits]).toEqual([trace.name, run.bufferCount]);
      pool.close();
    }
  });

  it('lays out a training step for its repetition: tensors that live across the boundary, or outlive a step', () => {
    // resnet18: 64 gradients live from the backward pass into the next step, and the logits of one step
    // are freed only at the end of the next (after that step allocated its own): a layout for the trace
    // as recorded puts later steps' tensors under them.
    const trace = readTrace(traceFixture('resnet18_train', 'trace.csv.gz'));
    expect(outlivesIteration(trace)).toBe(true);
    const plan = train(trace, { share: 'auto' });
    expect(plan.training.order).toBe('time-shared-repeating');
    expect(plan.schedule!.cycle).toBe(2);
    expect(plan.ratio!).toBeLessThanOrEqual(1.05);
    const file = path.join(tmp, 'repeating.plan.json');
    plan.write(file);
    expect(JSON.parse(fs.readFileSync(file, 'utf8')).schedule.cycle).toBe(2);
    const pool = new Pool({ plan: file, prefault: false });
    const run = repeatIteration(trace, trace.iterations, 5);
    expect(serve(pool, run)).toEqual({ os: 0, scheduleHits: run.bufferCount, busy: 0 });
    pool.close();
  });

  it('a layout that takes too long is given up, and training keeps the size-class plan', () => {
    // Many tensors live throughout (never freed) beside many short ones: greedy by size visits each placed
    // long one for every short one.
    const builder = new TraceBuilder();
    const random = seededRandom(7);
    for (let i = 0; i < 1500; i++) builder.alloc(64 + 64 * Math.floor(random() * 64), 0);
    for (let i = 0; i < 12000; i++) builder.free(builder.alloc(64 + 64 * Math.floor(random() * 64), 0), 0);
    const trace = builder.build('long-lived', 'tensorpool-csv');
    expect(trainTimeSharedEach(trace, [64], 0, undefined, 1)).toEqual([]);
    expect(trainTimeSharedEach(trace, [64], 0, undefined, 60_000)).toHaveLength(1);
    const plan = train(trace, { share: true, interval: 64 });
    expect(plan.arenaBytes).toBeGreaterThan(0);
  });

  it('finds the pairs that meet only across the boundary of a repeated iteration', () => {
    // Iteration 2 of: A (carried into 2, freed there after B) | B, C (carried out, as A was) | D
    const builder = new TraceBuilder();
    const a = builder.alloc(100, 0);
    builder.mark();
    const b = builder.alloc(64, 0); // allocated before A is freed: the next C is live beside it
    builder.free(a, 0);
    builder.free(b, 0);
    const d = builder.alloc(64, 0); // allocated after: meets no earlier C
    builder.free(d, 0);
    const c = builder.alloc(100, 0);
    const trace = builder.build('wrap', 'tensorpool-csv');
    expect(Array.from(wrapAroundConflicts(trace)!)).toEqual([c, b]);
    // Bounded before any pair is listed: C may meet the one allocation before A's free.
    expect(wrapAroundConflicts(trace, 1, 0)).toBeNull();
    expect(Array.from(wrapAroundConflicts(trace, 1, 1)!)).toEqual([c, b]);
    expect(outlivesIteration(trace)).toBe(false);
    // C allocated before A is freed: the next C would be allocated while this one lives.
    const longer = new TraceBuilder();
    const a2 = longer.alloc(100, 0);
    longer.mark();
    const c2 = longer.alloc(100, 0);
    longer.free(a2, 0);
    expect(c2).toBe(1);
    expect(outlivesIteration(longer.build('outlives', 'tensorpool-csv'))).toBe(true);
  });
});

describe('a recorded cycle of input shapes', () => {
  // ONNX Runtime serving six shapes in turn: each run leaves the next run's input and its own output live
  // across the boundary, and the runs after the recording go on cycling.
  const cycle = readTrace(fixture('traces', 'ocr_det_infer', 'ocr-cycle.csv.gz'));

  it('is recognised as a cycle of six after the session\'s creation, and trained to repeat as one', () => {
    expect(repeatingPeriod(cycle)).toBe(6);
    const plan = train(cycle, { order: 'auto' });
    expect(plan.layout).toBeDefined();
    expect(plan.schedule!.cycle).toBe(6);
    expect(plan.ratio!).toBeLessThanOrEqual(1.01);
    // Four more cycles than recorded: every allocation where its schedule put it, nothing from the OS.
    const run = repeatIterations(cycle, cycle.iterations - 5, cycle.iterations, 4);
    const pool = new Pool({ plan, prefault: false });
    expect(serve(pool, run)).toEqual({ os: 0, scheduleHits: run.bufferCount, busy: 0 });
    pool.close();
  });

  it('finds the period where the last iterations repeat the ones before, exactly or within 2%', () => {
    // resnet18's two steps: the second asks for two 4-byte buffers fewer than the first (of 722): a near repeat.
    expect(repeatingPeriod(readTrace(traceFixture('resnet18_train', 'trace.csv.gz')))).toBe(1);
    const steps = (sizes: number[][]) => {
      const builder = new TraceBuilder();
      sizes.forEach((step, i) => {
        if (i > 0) builder.mark();
        for (const size of step) builder.free(builder.alloc(size, 0), 0);
      });
      return builder.build('steps', 'tensorpool-csv');
    };
    expect(repeatingPeriod(steps([[1], [2, 3], [4], [3, 2], [4]]))).toBe(2); // order within a step is free
    expect(repeatingPeriod(steps([[1], [2], [2], [2]]))).toBe(1);
    expect(repeatingPeriod(steps([[1], [2], [3], [2]]))).toBe(0);
    // Iterations of 100 allocations: a first cycle with a one-off allocation still repeats (within 2%)...
    const a = Array.from({ length: 100 }, (_, i) => 1000 + i);
    const b = Array.from({ length: 100 }, (_, i) => 5000 + i);
    expect(repeatingPeriod(steps([[1], [...a, 77], b, a, b]))).toBe(2);
    expect(repeatingPeriod(steps([[1], a, [...b.slice(1), 78], a, b]))).toBe(2);
    // ...a first cycle that differs by more does not, and an exact repeat is preferred to a shorter near one
    // (two shapes within 2% of each other alternating: period 2, not 1).
    expect(repeatingPeriod(steps([[1], [...a, 77, 78, 79], b, a, b]))).toBe(0);
    const a2 = [...a.slice(1), 78];
    expect(repeatingPeriod(steps([[1], a, a2, a, a2]))).toBe(2);
  });
});

// Six request shapes, each a chain of layers (a layer's output allocated before its input is freed). An
// iteration is a busy period: one to three requests at once, their layers interleaved.
const shapes = Array.from({ length: 6 }, (_, k) => Array.from({ length: 8 }, (_, l) => 65536 * (1 + ((k * 5 + l * 3) % 11))));
function requests(periods: number[][], tail = false): Trace {
  const builder = new TraceBuilder();
  builder.free(builder.alloc(1 << 20, 0), 0); // the session's creation
  for (const period of periods) {
    builder.mark();
    let inputs = period.map((k) => builder.alloc(shapes[k][0], 0));
    for (let l = 1; l < 8; l++) {
      const outputs = period.map((k) => builder.alloc(shapes[k][l], 0));
      for (const input of inputs) builder.free(input, 0);
      inputs = outputs;
    }
    for (const input of inputs) builder.free(input, 0);
  }
  if (tail) {
    builder.mark();
    builder.free(builder.alloc(4096, 0), 0);
  }
  return builder.build('requests', 'tensorpool-csv');
}
/** n busy periods of one request of a random shape each, or (overlapping) one to three. */
const random = (seed: number, n: number, overlapping: boolean) => {
  const next = seededRandom(seed);
  const shape = () => Math.floor(next() * shapes.length);
  return Array.from({ length: n }, () => Array.from({ length: overlapping ? 1 + Math.floor(next() * 3) : 1 }, shape));
};

describe('iterations that keep changing (a service)', () => {
  it('is told from a training loop, a cycle of shapes and shapes in any order, a last iteration cut short or not', () => {
    expect(keepsChanging(requests(random(1, 60, true)))).toBe(true);
    expect(keepsChanging(requests(random(1, 60, true), true))).toBe(true);
    expect(keepsChanging(requests(random(1, 60, false)))).toBe(false); // each shape alone: seen before
    expect(keepsChanging(requests(Array(40).fill([2]), true))).toBe(false);
    expect(keepsChanging(requests(Array.from({ length: 24 }, (_, i) => [i % 6]), true))).toBe(false);
    expect(keepsChanging(requests([[0, 1], [2, 3], [4, 5]]))).toBe(false); // too few to tell
    expect(keepsChanging(readTrace(fixture('traces', 'ocr_det_infer', 'ocr-cycle.csv.gz')))).toBe(false);
  });

  it("keeps size classes under 'auto', which serve later requests where a layout of the recorded ones does not", () => {
    const recorded = requests(random(1, 60, true));
    const plan = train(recorded, { order: 'auto' });
    expect(plan.layout).toBeUndefined();
    expect(plan.training.iterationsKeepChanging).toBe(true);
    expect(plan.training.notTimeShared).toMatch(/new mixes of sizes/);
    const forced = train(recorded, { order: 'auto', share: true });
    expect(forced.layout).toBeDefined();

    const later = requests(random(2, 60, true));
    const [classes, shared] = [plan, forced].map((p) => {
      const pool = new Pool({ plan: p, prefault: false });
      const served = serve(pool, later);
      const arenaBytes = pool.stats().arenaBytes;
      pool.close();
      return { ...served, arenaBytes };
    });
    expect(forced.arenaBytes).toBeLessThan(plan.arenaBytes); // the layout is smaller as trained...
    expect(shared.busy).toBeGreaterThan(0); // ...but later mixes find its blocks busy
    expect(shared.arenaBytes).toBeGreaterThan(classes.arenaBytes); // and it grows past the size classes
    expect(classes.busy + classes.os + shared.os).toBe(0);
  });
});

describe('the spans kind: chosen by replaying the recording through the spans', () => {
  it('keeps it for requests that overlap at random, where later requests too hold less in spans than in the blocks', () => {
    const recorded = requests(random(1, 60, true));
    const plan = train(recorded, { order: 'auto' });
    expect(plan.serve).toBe('spans');
    const reserve = plan.spans!.reserve;
    const choice = plan.training.spans as { carvedBytes: number; servingBytes: number; classArenaBytes: number; chosen: boolean };
    expect(choice).toEqual({ carvedBytes: choice.carvedBytes, servingBytes: reserve, classArenaBytes: plan.arenaBytes, chosen: true });
    expect(choice.carvedBytes).toBeLessThan(plan.arenaBytes);
    // The reserve: what serving needs, start-up's passing peak (the session's creation, 1 MiB) left out.
    expect(reserve).toBeGreaterThan(0);
    expect(reserve).toBeLessThanOrEqual(choice.carvedBytes);
    // Requests it was not trained on: the plan's blocks, growing where they run out (as `tensorpool run
    // --plan` grows them), against the spans.
    const later = requests(random(2, 60, true));
    const pool = new Pool({ plan: { interval: plan.interval, classes: plan.classes, schedule: plan.schedule }, prefault: false, grow: true });
    expect(serve(pool, later).os).toBe(0);
    const blocksHeld = pool.stats().arenaBytes;
    pool.close();
    expect(replayThroughSpans(later).carvedBytes).toBeLessThan(blocksHeld);
    // Version 3 on file, read back whole.
    const file = path.join(tmp, 'spans.plan.json');
    plan.write(file);
    const json = JSON.parse(fs.readFileSync(file, 'utf8'));
    expect(json).toMatchObject({ version: 3, serve: 'spans', spans: { reserve } });
    expect(Plan.read(file).toJSON()).toEqual(plan.toJSON());
    // Asked for blocks, blocks.
    expect(train(recorded, { order: 'auto', serve: 'classes' }).serve).toBe('classes');
  });

  it("sizes the reserve by the serving part: start-up's passing peak left out, what start-up keeps live allocated first", () => {
    const builder = new TraceBuilder();
    const weights = builder.alloc(8 << 20, 0);
    builder.free(builder.alloc(64 << 20, 0), 0); // model loading: gone before the first run
    for (let k = 0; k < 3; k++) {
      builder.mark();
      builder.free(builder.alloc(4 << 20, 0), 0);
    }
    builder.free(weights, 0);
    const trace = builder.build('start-up', 'tensorpool-csv');
    const serving = servingPart(trace);
    expect(Array.from(serving.sizes)).toEqual([8 << 20, 4 << 20, 4 << 20, 4 << 20]);
    expect(serving.iterations).toBe(trace.iterations);
    expect(serving.lowerBound()).toBe(12 << 20);
    const carved = replayThroughSpans(serving).carvedBytes;
    expect(carved).toBeGreaterThanOrEqual(12 << 20);
    expect(carved).toBeLessThan(replayThroughSpans(trace).carvedBytes);
    expect(train(trace, { serve: 'spans' }).spans!.reserve).toBe(carved);
  });

  it('keeps the blocks of a repeating loop: one shape again and again, a cycle of shapes, shapes in any order, a recorded cycle', () => {
    const loops = [
      requests(random(3, 40, false)),
      requests(Array(40).fill([2])),
      requests(Array.from({ length: 24 }, (_, i) => [i % 6])),
      readTrace(fixture('traces', 'ocr_det_infer', 'ocr-cycle.csv.gz')),
    ];
    for (const trace of loops) {
      const plan = train(trace, { order: 'auto' });
      expect(plan.serve, trace.name).toBe('classes');
      expect(plan.spans).toBeUndefined();
      const spans = plan.training.spans as { carvedBytes: number; classArenaBytes: number; chosen: boolean };
      expect(spans.chosen).toBe(false);
      expect(spans.carvedBytes).toBeGreaterThanOrEqual(spans.classArenaBytes);
      expect(plan.toJSON().version).toBe(2);
    }
    expect(train(loops[0], { serve: 'spans' }).serve).toBe('spans'); // asked for
    expect(() => train(loops[0], { serve: 'blocks' as never })).toThrow(/options\.serve must be one of 'classes', 'spans', 'auto'/);
  });
});

describe('plan JSON version 2', () => {
  it('round-trips layout, blocks and iterations; version 1 files still load', () => {
    const plan = train(ocr.slice(0, 2), { order: 'auto', share: 'auto' });
    const file = path.join(tmp, 'shared.plan.json');
    plan.write(file);
    const json = JSON.parse(fs.readFileSync(file, 'utf8'));
    expect(json.version).toBe(2);
    expect(json.layout.classes).toHaveLength(plan.blocks);
    expect(json.schedule.blocks).toHaveLength(json.schedule.sizes.length);
    expect(json.totals.sharingPairs).toBe(plan.sharingPairs);
    expect(plan.sharingPairs).toBeGreaterThan(0);
    const back = Plan.read(file);
    expect(back.toJSON()).toEqual(plan.toJSON());
    const pool = new Pool({ plan: file, prefault: false });
    expect(serve(pool, ocr[1]).os).toBe(0);
    pool.close();

    const v1 = path.join(tmp, 'v1.plan.json');
    fs.writeFileSync(v1, JSON.stringify({ format: 'tensorpool-plan', version: 1, interval: 4096, classes: [{ size: 4096, blocks: 2 }] }));
    expect(Plan.read(v1).classes).toEqual([{ size: 4096, blocks: 2 }]);
  });

  it('train() takes several traces only whole, and only traces', () => {
    expect(() => train(ocr.slice(0, 2), { iteration: 1 })).toThrow(/options\.iteration applies to one trace/);
    expect(() => train([] as Trace[])).toThrow(/non-empty array/);
    expect(() => train([ocr[0], 'x' as never])).toThrow(/element 1 is/);
    expect(() => train(ocr[0], { share: 'yes' as never })).toThrow(/options\.share/);
  });
});

describe('time-shared blocks on torch inference traces', () => {
  const dir = fixture('traces', 'torch_infer');
  for (const file of fs.readdirSync(dir).filter((f) => f.endsWith('.json.gz')).sort()) {
    it(`${file}: within 1.10x of the lower bound, served with no OS fallback`, () => {
      const trace = readTrace(path.join(dir, file));
      const plan = train(trace, { order: 'auto', share: 'auto' });
      expect(plan.ratio!).toBeLessThanOrEqual(1.1);
      expect(plan.arenaBytes).toBeLessThanOrEqual(train(trace, { order: 'auto', share: false }).arenaBytes);
      const pool = new Pool({ plan, prefault: false });
      for (let rep = 0; rep < 2; rep++) expect(serve(pool, trace)).toMatchObject({ os: 0, scheduleHits: trace.summary().allocs });
      pool.close();
    });
  }
});

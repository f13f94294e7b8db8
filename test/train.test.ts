import { describe, expect, it } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { AUTO_INTERVALS, SMALL_AUTO_INTERVALS, Plan, Pool, TensorPoolError, parseTrace, readTrace, syntheticTrainingTrace, train, type PoolStats, type Trace, type TrainCandidate } from '../lib/index.js';
import { jsonPieces } from '../lib/io/json-pieces.js';
import { OffsetPlan } from '../lib/offsets/offset-plan.js';
import { runTrace, traceFixture } from './helpers.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-train-'));

/** Replays a trace's allocs and frees in order through a pool (no touching: routing is what is checked). */
function replayThrough(pool: Pool, trace: Trace): PoolStats {
  const live = runTrace(pool, trace);
  const stats = pool.stats();
  for (const buffer of live.values()) pool.release(buffer);
  return stats;
}

// A worked example of S0 (interval 4096; t = time):
//   t0 A 4096 alloc | t1 B 3000 alloc | t2 B free | t3 C 8000 alloc | t4 C free
//   t5 D 100 alloc  | t6 E 4096 alloc | t7 A free | t8 D free | t9 E free
const worked = parseTrace(
  Buffer.from('op,id,size,stream\na,1,4096,0\na,2,3000,0\nf,2,,0\na,3,8000,0\nf,3,,0\na,4,100,0\na,5,4096,0\nf,1,,0\nf,4,,0\nf,5,,0\n'),
  'worked.csv',
);

describe('train(): S0 size-class linked blocks', () => {
  it('alloc-time order: own class, else the first conflict-free larger block, else a new own block', () => {
    const plan = train(worked, { share: false, interval: 4096 });
    // A opens block 0 of class 4096; B conflicts with A and nothing larger exists yet: block 1; C opens
    // class 8192; D reuses block 1 (B ended at t2); E finds both 4096 blocks busy and borrows C's block.
    expect(plan.classes).toEqual([{ size: 4096, blocks: 2 }, { size: 8192, blocks: 1 }]);
    expect(plan.training.borrows).toBe(1);
    expect(Array.from(plan.schedule!.classes)).toEqual([0, 0, 1, 0, 1]);
    expect(plan.lowerBound).toBe(4096 + 8000); // A and C at t3
  });

  it('size-desc order visits C, A, E, B, D', () => {
    const plan = train(worked, { share: false, interval: 4096, order: 'size-desc' });
    // C opens 8192; A opens 4096 (C's block holds [3,4), A lives [0,7)); E [6,9) borrows C's block;
    // B [1,2) fits C's block too; D [5,8) conflicts with A and with E there: a second 4096 block.
    expect(plan.classes).toEqual([{ size: 4096, blocks: 2 }, { size: 8192, blocks: 1 }]);
    expect(plan.training.borrows).toBe(2);
    expect(Array.from(plan.schedule!.classes)).toEqual([0, 1, 1, 0, 1]);
  });

  it('rounds sizes up to the interval to name their class', () => {
    // A 4096 -> 5000; B 3000 -> 3000 (A holds the 5000); C 8000; D 100 -> 1000 has no block yet and
    // borrows B's 3000, free since t2: class 1000 is never made.
    const plan = train(worked, { share: false, interval: 1000 });
    expect(plan.classes.map((c) => c.size)).toEqual([3000, 5000, 8000]);
    for (const c of plan.classes) expect(c.size % 1000).toBe(0);
  });

  it("interval 'auto' keeps the candidate with the fewest arena bytes and reports every candidate", () => {
    const trace = readTrace(traceFixture('transformer_train', 'trace.csv.gz'));
    const plan = train(trace, { share: false, interval: 'auto' });
    const candidates = plan.training.candidates as { interval: number; arenaBytes: number }[];
    // The transformer asks for some tensors below 512 B (layer norms' statistics): the small intervals first.
    expect(candidates.map((c) => c.interval)).toEqual([...SMALL_AUTO_INTERVALS, ...AUTO_INTERVALS]);
    expect(plan.arenaBytes).toBe(Math.min(...candidates.map((c) => c.arenaBytes)));
    const both = train(trace, { share: false, order: 'auto' });
    expect((both.training.candidates as unknown[]).length).toBe(2 * (SMALL_AUTO_INTERVALS.length + AUTO_INTERVALS.length));
    expect(both.arenaBytes).toBeLessThanOrEqual(plan.arenaBytes);
    const large = parseTrace(Buffer.from('op,id,size,stream\na,1,4096,0\na,2,512,0\nf,1,,0\nf,2,,0\n'), 'large.csv');
    const onlyLarge = train(large, { share: false, interval: 'auto' }).training.candidates as { interval: number }[];
    expect(onlyLarge.map((c) => c.interval)).toEqual([...AUTO_INTERVALS]);
  });

  it("interval 'auto' on small requests (a process recorded at a low threshold) keeps a small interval", () => {
    // 400 requests of 8-200 B live at once, then freed: in classes of 512 B each wastes most of its block.
    let csv = 'op,id,size,stream\n';
    for (let i = 0; i < 400; i++) csv += `a,${i},${8 + ((i * 37) % 193)},0\n`;
    for (let i = 0; i < 400; i++) csv += `f,${i},,0\n`;
    const small = parseTrace(Buffer.from(csv), 'small.csv');
    const plan = train(small, { share: false });
    const candidates = plan.training.candidates as { interval: number; arenaBytes: number }[];
    const at512 = candidates.find((c) => c.interval === 512)!;
    expect(plan.interval).toBeLessThan(512);
    expect(plan.arenaBytes).toBeLessThan(at512.arenaBytes / 2);
    expect(replayThrough(new Pool({ plan }), small).osFallbacks).toBe(0);
  });

  it('says why a time-shared plan was not kept', () => {
    // Two tensors of one size live at once: a layout saves nothing over one class of two blocks.
    const flat = parseTrace(Buffer.from('op,id,size,stream\na,1,4096,0\na,2,4096,0\nf,1,,0\nf,2,,0\n'), 'flat.csv');
    expect(train(flat).training.notTimeShared).toBe('not 2% smaller than the size classes');
    expect(train(flat, { share: true }).training.notTimeShared).toBeUndefined(); // as small: kept
    expect(train(flat, { share: false }).training.notTimeShared).toBeUndefined();
    expect(train(worked).training.notTimeShared).toBeUndefined(); // kept
  });

  it('refines beyond S0: never a larger arena, below 1.25x the lower bound on both shared traces with auto', () => {
    for (const name of ['resnet18_train', 'transformer_train']) {
      const trace = readTrace(traceFixture(name, 'trace.csv.gz'));
      const literal = train(trace, { share: false, order: 'auto', refine: false });
      const refined = train(trace, { share: false, order: 'auto' }); // refine is on with order 'auto'
      expect(refined.training).toMatchObject({ refined: true, method: 'S0 size-class linked blocks, refined' });
      expect(refined.arenaBytes).toBeLessThanOrEqual(literal.arenaBytes);
      expect(refined.ratio!).toBeLessThanOrEqual(1.25);
      for (const c of refined.training.candidates as TrainCandidate[]) {
        expect(c.refined).toBe(true);
        expect(c.arenaBytes).toBeLessThanOrEqual(c.literalArenaBytes);
      }
      expect(train(trace, { share: false, interval: 4096 }).training.refined).toBe(false); // S0 literally by default
    }
  });

  it('trains on one iteration', () => {
    const trace = readTrace(traceFixture('resnet18_train', 'trace.csv.gz'));
    const plan = train(trace, { share: false, iteration: 2, interval: 4096 });
    expect(plan.training.iteration).toBe(2);
    expect(plan.training.tensors).toBe(trace.iteration(2).bufferCount);
    expect(plan.schedule!.sizes.length).toBe(trace.iteration(2).bufferCount);
  });

  it('validates its options', () => {
    for (const bad of [{ order: 'random' }, { interval: 0 }, { interval: 1.5 }, { iteration: 3 }, { iteration: 0 }, { candidates: [] }, { speed: 1 }, { refine: 'yes' }]) {
      expect(() => train(worked, bad as never)).toThrow(/^options/);
    }
    const empty = parseTrace(Buffer.from('op,id,size,stream\n'), 'empty.csv');
    expect(() => train(empty)).toThrow(/nothing to train on/);
    for (const notATrace of ['x', 42, null, { sizes: [] }]) {
      expect(() => train(notATrace as never)).toThrow(/train\(\) takes a Trace .*, got /);
    }
  });
});

describe('Plan JSON', () => {
  it('round-trips, and a pool takes a Plan, a spec or a file', () => {
    const plan = train(worked, { share: false, interval: 4096, serve: 'classes' });
    const file = path.join(tmp, 'worked.plan.json');
    plan.write(file);
    const json = JSON.parse(fs.readFileSync(file, 'utf8'));
    expect(json).toMatchObject({ format: 'tensorpool-plan', version: 2, interval: 4096, lowerBound: plan.lowerBound });
    expect(json.totals).toEqual({ blocks: 3, classBytes: 2 * 4096 + 8192, arenaBytes: plan.arenaBytes });
    expect(json.source).toMatchObject({ trace: 'worked.csv', events: worked.eventCount, buffers: 5 });
    const back = Plan.read(file);
    expect(back.toJSON()).toEqual(plan.toJSON());
    for (const source of [plan, back, file, { interval: plan.interval, classes: plan.classes }]) {
      const pool = new Pool({ plan: source });
      expect(pool.stats().classes.map((c) => [c.size, c.blocks])).toEqual([[4096, 2], [8192, 1]]);
      pool.close();
    }
  });

  it('rejects other versions and non-plans with a message that says why', () => {
    const good = train(worked, { share: false, interval: 4096, serve: 'classes' }).toJSON();
    const cases: [unknown, RegExp][] = [
      [{ ...good, version: 4 }, /version 4 is not supported: this tensorpool reads versions 1, 2, 3 \(the file was written by a newer tensorpool/],
      [{ ...good, version: 1, layout: { classes: [0, 0, 1], offsets: [0, 0, 8192] } }, /a version 1 plan has no layout/],
      [{ ...good, layout: { classes: [0, 1], offsets: [0, 8192] } }, /layout: places 1 blocks of class 0 \(4096 bytes\), which has 2/],
      [{ ...good, layout: { classes: [0, 0, 1], offsets: [0, 100, 8192] } }, /layout\.offsets\[1\]: must be a multiple of 64/],
      [{ ...good, schedule: { sizes: [4096], classes: [0], blocks: [0] } }, /schedule\.blocks: names blocks, but the plan has no layout/],
      [{ ...good, layout: { classes: [0, 0, 1], offsets: [0, 0, 8192] }, schedule: { sizes: [4096], classes: [0], blocks: [2] } }, /schedule\.blocks\[0\]: must be a block of class 0/],
      [{ ...good, schedule: { ...good.schedule, iterations: [1] } }, /schedule\.iterations\[0\]: must ascend from 0/],
      [{ ...good, schedule: { ...good.schedule, cycle: 2 } }, /schedule\.cycle: must be an integer from 1 to the 1 iteration\(s\) of the schedule, got 2/],
      [{ ...good, schedule: { ...good.schedule, iterations: [0, 1], cycle: 0.5 } }, /schedule\.cycle: must be an integer from 1 to the 2/],
      [{ ...good, version: '1' }, /version "1" is not supported/],
      [{ ...good, format: 'other' }, /not a tensorpool plan/],
      [[1, 2], /a plan is a JSON object/],
      [{ ...good, classes: [{ size: 100, blocks: 1 }] }, /classes\[0\]\.size: 100 is not a multiple of the interval 4096/],
      [{ ...good, schedule: { sizes: [4096, 99999], classes: [0, 0] } }, /schedule\.classes\[1\]: class 0 \(4096 bytes\) cannot hold 99999 bytes/],
      [{ ...good, schedule: { sizes: [1], classes: [7] } }, /schedule\.classes\[0\]: must be a class index below 2/],
      [{ ...good, lowerBound: -1 }, /lowerBound/],
      [{ ...good, serve: 'spans', spans: { reserve: 4096 } }, /a version 2 plan has no serve or spans field \(they came with version 3\)/],
      [{ ...good, version: 3, serve: 'blocks' }, /serve: must be one of 'classes', 'spans', got the string "blocks"/],
      [{ ...good, version: 3, serve: 'spans' }, /spans: must be an object \{ reserve \} in a plan that says serve: 'spans', got undefined/],
      [{ ...good, version: 3, serve: 'spans', spans: { reserve: -1 } }, /spans\.reserve: must be an integer between 0 and 1099511627776, got -1/],
      [{ ...good, version: 3, serve: 'spans', spans: { reserve: 2 ** 41 } }, /spans\.reserve: must be an integer between 0 and 1099511627776/],
      [{ ...good, version: 3, spans: { reserve: 4096 } }, /spans: only a plan that says serve: 'spans' has it/],
    ];
    for (const [json, message] of cases) {
      const file = path.join(tmp, 'bad.plan.json');
      fs.writeFileSync(file, JSON.stringify(json));
      let error: unknown;
      try {
        Plan.read(file);
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(TensorPoolError);
      expect((error as Error).message).toContain(file);
      expect((error as Error).message).toMatch(message);
      expect(() => new Pool({ plan: file })).toThrow(message);
    }
    fs.writeFileSync(path.join(tmp, 'broken.json'), '{"format": ');
    expect(() => Plan.read(path.join(tmp, 'broken.json'))).toThrow(/broken\.json: not valid JSON/);
    expect(() => Plan.read(path.join(tmp, 'absent.json'))).toThrow(/absent\.json: cannot read the plan/);
  });

  it('reads a plan file bounded: an endless one is refused with the file and the bound named, not read until the process aborts', () => {
    const bound = /\/dev\/zero: the (offset )?plan is more than \d+ bytes, the most a (offset )?plan may hold/;
    expect(() => Plan.read('/dev/zero')).toThrow(bound);
    expect(() => new Pool({ plan: '/dev/zero' })).toThrow(bound);
    expect(() => OffsetPlan.read('/dev/zero')).toThrow(bound);
  });

  it('writes a plan piece by piece, the same JSON as one string would hold, and reads it back', () => {
    const plan = train(readTrace(traceFixture('resnet18_train', 'trace.csv.gz')), { order: 'auto' });
    const file = path.join(tmp, 'pieces.plan.json');
    plan.write(file);
    expect(fs.readFileSync(file, 'utf8')).toBe(JSON.stringify(plan.toJSON(), null, 2) + '\n');
    expect(Plan.read(file).toJSON()).toEqual(plan.toJSON());
    const values: unknown[] = [[], {}, [[], {}], { a: [1, { b: null, c: undefined, d: 'x"y' }], e: [undefined, 2.5] }, 'text', 0, null, { toJSON: () => [1] }];
    for (const value of values) {
      for (const indent of ['', '  ']) expect([...jsonPieces(value, indent)].join('')).toBe(JSON.stringify(value, null, indent) + '\n');
    }
  });
});

describe('closing the loop: a pool built from a trained plan serves its trace as training predicted', () => {
  const traces: [string, Trace][] = [
    ['resnet18_train', readTrace(traceFixture('resnet18_train', 'trace.csv.gz'))],
    ['transformer_train', readTrace(traceFixture('transformer_train', 'trace.json.gz'))],
    ['synthetic', syntheticTrainingTrace({ layers: 40, iterations: 5, seed: 7 })],
  ];
  for (const [name, trace] of traces) {
    for (const [order, refine] of [['alloc-time', false], ['size-desc', false], ['alloc-time', true], ['size-desc', true]] as const) {
      it(`${name}, ${order}${refine ? ', refined' : ''}: no OS fallback, exactly the borrows training made`, () => {
        const plan = train(trace, { share: false, order, refine });
        expect(plan.training.refined).toBe(refine);
        const pool = new Pool({ plan, prefault: false });
        const s = replayThrough(pool, trace);
        expect(s.osFallbacks + s.osOversize).toBe(0);
        expect(s.borrows).toBe(plan.training.borrows);
        expect(s.hits).toBe(trace.bufferCount - (plan.training.borrows as number));
        expect(s.scheduleHits).toBe(trace.bufferCount);
        expect(s.scheduleMisses).toBe(0);
        expect(s.peakBytesLive).toBe(trace.lowerBound());
        pool.close();
      });
    }
  }

  it('an iteration-trained plan serves that iteration again and again with markIteration()', () => {
    const trace = syntheticTrainingTrace({ layers: 30, iterations: 3, seed: 3 });
    const one = trace.iteration(2);
    const plan = train(trace, { share: false, iteration: 2, order: 'size-desc' });
    const pool = new Pool({ plan, prefault: false });
    for (let i = 0; i < 5; i++) {
      pool.markIteration();
      replayThrough(pool, one);
    }
    const s = pool.stats();
    expect(s.osFallbacks).toBe(0);
    expect(s.scheduleMisses).toBe(0);
    expect(s.borrows).toBe(5 * (plan.training.borrows as number));
    expect(s.iterations).toBe(5);
  });

  it('a run that departs from the plan is still served, by class routing and then the OS', () => {
    const resnet = traces[0][1];
    const pool = new Pool({ plan: train(traces[2][1]), prefault: false });
    const s = replayThrough(pool, resnet);
    expect(s.scheduleMisses).toBeGreaterThan(0);
    expect(s.allocs).toBe(resnet.bufferCount);
    expect(s.hits + s.borrows + s.osFallbacks + s.osOversize).toBe(s.allocs);
  });
});

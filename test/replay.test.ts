import { describe, expect, it } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { OffsetPlan, Plan, readTrace, replay, syntheticTrainingTrace, train, type Pool } from '../lib/index.js';
import { JsReplayer } from '../lib/replay/js-replayer.js';
import { pairedTime } from '../lib/replay/replay.js';
import { EventOp, TraceBuilder } from '../lib/trace/trace.js';
import { findLibrary, isAvailable, missingMessage, resolveAllocator } from '../lib/replay/allocators.js';
import { replayReportHtml } from '../lib/report/html.js';
import { expectUsageError, run, traceFixture } from './helpers.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-replay-'));
const transformer = traceFixture('transformer_train', 'trace.csv.gz');

describe('replay(): tensorpool against real allocators, each in its own process', () => {
  it('measures time, faults and RSS; tensorpool takes no steady-state fault and serves as planned', async () => {
    const report = await replay(transformer, { allocators: ['tensorpool', 'tensorpool-offsets', 'malloc', 'ideal'], reps: 4 });
    expect(report).toMatchObject({ reps: 4, touch: 'pages', events: 4337, buffers: 2196, lowerBoundBytes: 140107820 });
    const [pool, offsets, malloc, ideal] = report.results;
    expect(pool.allocator).toBe('tensorpool');
    expect(offsets.allocator).toBe('tensorpool-offsets');
    expect(ideal.allocator).toBe('ideal');
    for (const r of [pool, offsets, malloc, ideal]) {
      expect(r.available).toBe(true);
      expect(r.repetitions).toHaveLength(4);
      expect(r.repetitions.every((rep) => rep.allocs === 2196 && rep.releases === 2196)).toBe(true);
      expect(r.nsPerOp).toBeGreaterThan(0);
      expect(r.allocNs).toBeGreaterThan(0); // repetitions 1 and 3 time every call
      expect(r.peakRssBytes).toBeGreaterThan(r.rssGrowthBytes);
      expect(r.faultSource).toMatch(/perf_event|getrusage/);
    }
    expect(pool.steadyMinorFaultsPerRep).toBe(0);
    // Paired by round: repetitions 2 (wall clock) of each, the steady half's only untimed one.
    expect(pairedTime(pool, pool)).toEqual({ median: 1, low: 1, high: 1, confidence: 0 });
    expect(pairedTime(pool, ideal)!.median).toBeCloseTo(pool.repetitions[2].ns / ideal.repetitions[2].ns, 12);
    expect(pool.pool).toMatchObject({ osFallbacks: 0, osOversize: 0, scheduleMisses: 0, scheduleHits: 2196 });
    // The pre-faulted arena is growth over the worker's baseline: about the plan's arena (less what the
    // worker's heap gave back after the baseline was taken: once seen at 0.9896 of it).
    expect(pool.rssGrowthBytes).toBeGreaterThanOrEqual(report.plan!.arenaBytes * 0.98);
    expect(pool.rssVsLowerBound).toBeCloseTo(pool.rssGrowthBytes / report.lowerBoundBytes, 10);
    // Offsets mode: every allocation at its planned offset, in an arena of the plan's height.
    expect(offsets.steadyMinorFaultsPerRep).toBe(0);
    expect(offsets.pool).toMatchObject({ offsetHits: 2196, offsetMisses: 0, osFallbacks: 0 });
    expect(report.offsetPlan!.height).toBeGreaterThanOrEqual(report.lowerBoundBytes);
    expect(offsets.rssGrowthBytes).toBeGreaterThanOrEqual(report.offsetPlan!.height * 0.98);
    // The counter counts: glibc faults its memory in on the first repetition. (Its steady state varies from
    // run to run as its mmap threshold rises: 139 faults per repetition in one CI run of the preload suite's
    // replay, tens of thousands in others.)
    expect(malloc.repetitions[0].minorFaults).toBeGreaterThan(1000);
    // The yardstick: the offset plan's addresses, pre-faulted, nothing else; not a peer.
    expect(ideal.steadyMinorFaultsPerRep).toBe(0);
    expect(ideal.rssGrowthBytes).toBeGreaterThanOrEqual(report.offsetPlan!.height * 0.98);
    expect(ideal.pool).toBeUndefined();
    expect(malloc.vsBestPeer).toBe(1);
    expect(ideal.vsBestPeer).toBeCloseTo(ideal.nsPerOp / malloc.nsPerOp, 10);
    expect(pool.vsBestPeer).toBeCloseTo(pool.nsPerOp / malloc.nsPerOp, 10);
    expect(offsets.vsBestPeer).toBeCloseTo(offsets.nsPerOp / malloc.nsPerOp, 10);
    // The one peer measured is the best; every ratio's spread comes from the repetitions paired with it.
    expect(report.bestPeer).toBe('malloc');
    expect(malloc.vsBestPeerInterval).toMatchObject({ median: 1, low: 1, high: 1 });
    for (const r of [pool, offsets, ideal]) expect(r.vsBestPeerInterval).toEqual(pairedTime(r, malloc));
    for (const r of [pool, offsets, malloc, ideal]) {
      expect(r.spread.nsPerOp.median).toBe(r.nsPerOp);
      expect(r.spread.nsPerOp.low).toBeLessThanOrEqual(r.nsPerOp);
      expect(r.spread.nsPerOp.high).toBeGreaterThanOrEqual(r.nsPerOp);
      expect(r.spread.allocNs!.median).toBe(r.allocNs);
      expect(r.spread.minorFaults.min).toBeLessThanOrEqual(r.steadyMinorFaultsPerRep);
      expect(r.spread.minorFaults.max).toBeGreaterThanOrEqual(r.steadyMinorFaultsPerRep);
    }
  });

  it('touch modes, a plan trained elsewhere, and a per-iteration plan', async () => {
    const synthetic = syntheticTrainingTrace({ layers: 16, iterations: 4, seed: 5 });
    const perIteration = train(synthetic, { iteration: 2, order: 'size-desc' });
    for (const touch of ['none', 'full'] as const) {
      const report = await replay(synthetic, { allocators: ['tensorpool'], reps: 2, touch, plan: perIteration });
      const pool = report.results[0];
      expect(pool.available).toBe(true);
      expect(report.touch).toBe(touch);
      // Iterations 2..4 repeat iteration 2: each is scheduled from its start (iteration marks).
      expect(pool.pool!.scheduleHits).toBeGreaterThan(0);
    }
    const file = path.join(tmp, 'resnet.plan.json');
    train(readTrace(traceFixture('resnet18_train', 'trace.csv.gz'))).write(file);
    const report = await replay(transformer, { allocators: ['tensorpool'], reps: 2, plan: file });
    expect(report.plan!.warnings.join('\n')).toMatch(/differs from this trace|larger than the plan's largest class/);
    expect(report.results[0].available).toBe(true);

    // An offset plan of another trace is refused before anything runs: ideal would be a false floor.
    const other = OffsetPlan.fromTrace(synthetic, { iteration: 2 });
    await expect(replay(transformer, { allocators: ['ideal', 'malloc'], reps: 2, offsetPlan: other })).rejects.toMatchObject({
      code: 'ERR_TP_BAD_PLAN',
      message: expect.stringMatching(/the offset plan \(\d+ buffers, planned on iteration 2 of .*\) does not match .*transformer.* allocations/),
    });
    // Its own plan fits (one iteration's plan would fit only a trace whose iterations all repeat it).
    const own = OffsetPlan.fromTrace(readTrace(transformer));
    const fitted = await replay(transformer, { allocators: ['ideal'], reps: 2, offsetPlan: own });
    expect(fitted.results[0].available).toBe(true);
    // Its sizes, but every block at offset 0 (the file still claims optimal): overlapping blocks are refused,
    // not measured as the floor.
    const overlapping = path.join(tmp, 'overlapping.offsets.json');
    fs.writeFileSync(overlapping, JSON.stringify({ ...own.toJSON(), offsets: own.toJSON().offsets.map(() => 0) }));
    for (const allocators of [['ideal'], ['tensorpool-offsets']] as const) {
      await expect(replay(transformer, { allocators: [...allocators], reps: 2, offsetPlan: overlapping })).rejects.toMatchObject({
        code: 'ERR_TP_BAD_PLAN',
        message: expect.stringMatching(/the offset plan does not fit .*transformer.*overlap/),
      });
    }
  });

  it("touch 'verify': every route's buffers keep their stamps; a block handed out twice shows", async () => {
    const synthetic = syntheticTrainingTrace({ layers: 8, iterations: 2, seed: 9 });
    const report = await replay(synthetic, { allocators: ['tensorpool', 'tensorpool-js', 'malloc', 'ideal'], reps: 2, touch: 'verify' });
    for (const r of report.results) expect({ allocator: r.allocator, available: r.available, corruptions: r.corruptions }).toEqual({ allocator: r.allocator, available: true, corruptions: 0 });
    // The JS loop's stamps, against an "allocator" that hands every request the same memory.
    const trace = readTrace(transformer);
    const shared = new ArrayBuffer(Math.max(...trace.sizes));
    const oneBlock = { alloc: () => shared, release() {}, markIteration() {} };
    const r = new JsReplayer(oneBlock as unknown as Pool, trace, { touch: 'verify', iterationMarks: false }).run(false);
    expect(r.corruptions).toBeGreaterThan(0);
  });

  it("the JS loop marks the trace's iterations as the native loop does", () => {
    // With the trace's marks, the first repetition starts at the trace's first iteration (no mark before it:
    // a multi-schedule plan would be followed one schedule ahead); every later one starts with a mark.
    const trace = readTrace(transformer);
    const iterations = trace.ops.filter((op) => op === EventOp.Iteration).length;
    let marks = 0;
    const buffer = new ArrayBuffer(Math.max(...trace.sizes));
    const counting = { alloc: () => buffer, release() {}, markIteration: () => void marks++ };
    const js = new JsReplayer(counting as unknown as Pool, trace, { touch: 'none', iterationMarks: true });
    js.run(false);
    expect(marks).toBe(iterations);
    js.run(false);
    expect(marks).toBe(2 * iterations + 1);
  });

  it('finds the peers it can, and names the package of one that is missing', () => {
    expect(findLibrary('libtensorpool-no-such-allocator.so.9')).toBeUndefined();
    const missing = { ...resolveAllocator('jemalloc'), library: undefined };
    expect(isAvailable(missing)).toBe(false);
    expect(missingMessage(missing)).toBe('jemalloc: not installed (libjemalloc.so.2 not found; apt-get install libjemalloc2, or run bench/install-peers.sh)');
    expect(isAvailable(resolveAllocator('malloc'))).toBe(true);
  });

  const jemalloc = resolveAllocator('jemalloc');
  it.skipIf(!isAvailable(jemalloc))('really runs a peer: the worker checks the preloaded library is mapped', async () => {
    const report = await replay(transformer, { allocators: ['jemalloc'], reps: 2 });
    expect(report.results[0].available).toBe(true);
    expect(report.results[0].error).toBeUndefined();
  });

  it('rejects bad options', async () => {
    await expect(replay(transformer, { reps: 0 })).rejects.toThrow(/options\.reps must be between 1/);
    await expect(replay(transformer, { allocators: ['dlmalloc' as never] })).rejects.toThrow(/options\.allocators\[0\] must be one of/);
    await expect(replay(transformer, { touch: 'some' as never })).rejects.toThrow(/options\.touch/);
    await expect(replay(path.join(tmp, 'missing.csv'))).rejects.toThrow(/missing\.csv: cannot read the trace/);
    await expect(replay(transformer, { plan: path.join(tmp, 'missing.json') })).rejects.toThrow(/cannot read the plan/);
    // More live at once than the machine has: refused before any worker is started (they were OOM-killed).
    const builder = new TraceBuilder();
    builder.free(builder.alloc(os.totalmem() + 4096, 0), 0);
    await expect(replay(builder.build('beyond-memory', 'tensorpool-csv'), { reps: 1 })).rejects.toMatchObject({
      code: 'ERR_TP_OUT_OF_MEMORY',
      message: expect.stringMatching(/^beyond-memory: at its peak the trace holds \d+ bytes live, more than this machine's memory/),
    });
  });
});

describe('tensorpool replay / bench (CLI) and the HTML report', () => {
  it('bench: replays the bundled trace, prints the table, writes --json and --report', () => {
    const json = path.join(tmp, 'bench.json');
    const html = path.join(tmp, 'bench.html');
    const r = run('bench', '--reps', '2', '--allocators', 'tensorpool,malloc', '--json', json, '--report', html);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/resnet18_train\.csv\.gz: 2821 events, 1442 buffers/);
    expect(r.stdout).toMatch(/allocator\s+ns\/op\s+alloc ns\s+release ns\s+x best peer\s+faults\/rep\s+peak RSS\s+RSS growth\s+x LB/);
    expect(r.stderr).toMatch(/replay: 4\/4 repetitions/);
    // The plan (time-shared, laid out for the trace and its last iteration once more) follows every
    // allocation, and nothing printed says otherwise (a warning once counted the extra iteration).
    expect(r.stdout).toMatch(/order time-shared-repeating/);
    expect(r.stdout).toMatch(/tensorpool per repetition: .*schedule 1442 hits, 0 misses/);
    expect(r.stdout).not.toMatch(/warning/);
    // The legend under the table: each column, the best peer by its rule, each row.
    for (const key of ['ns/op', '±', 'x best peer', 'faults/rep', 'RSS growth', 'x LB', 'tensorpool', 'malloc']) {
      expect(r.stdout).toMatch(new RegExp(`^  ${key.replace('/', '\\/')} +\\S`, 'm'));
    }
    expect(r.stdout).toMatch(/lowest median ns\/op in this run: malloc/);
    const out = JSON.parse(fs.readFileSync(json, 'utf8'));
    expect(out).toMatchObject({ reps: 2, touch: 'pages' });
    expect(out.trace).toMatch(/resnet18_train/);
    for (const result of out.results) {
      for (const key of ['allocator', 'nsPerOp', 'steadyMinorFaultsPerRep', 'peakRssBytes', 'rssGrowthBytes', 'lowerBoundBytes']) {
        expect(result).toHaveProperty(key);
      }
    }
    const page = fs.readFileSync(html, 'utf8');
    expect(page.startsWith('<!doctype html>')).toBe(true);
    for (const id of ['results', 'ns-per-op', 'faults', 'rss', 'timeline']) expect(page).toContain(`id="${id}"`);
    expect(page.match(/<svg /g)).toHaveLength(4);
    expect(page).toMatch(/<polyline points="(\d+(\.\d)?,\d+(\.\d)? ){100,}/); // the memory timeline
    expect(page).toContain('lower bound 205 MiB');
    expect(page).toMatch(/tensorpool arena \d+ MiB/);
    for (const name of ['tensorpool', 'malloc']) expect(page).toContain(`>${name}<`);
    // Self-contained: nothing is fetched (the SVG namespace is a name, not a request).
    expect(page.replace(/xmlns="http:\/\/www\.w3\.org\/2000\/svg"/g, '')).not.toMatch(/https?:|<script|<link|@import|src=/);
  });

  it("replay --touch verify: a column of corrupt buffers, exit 0 when there are none", () => {
    const r = run('replay', transformer, '--reps', '2', '--allocators', 'tensorpool,malloc', '--touch', 'verify');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/touch verify/);
    expect(r.stdout).toMatch(/allocator\s+corrupt\s+ns\/op/);
    expect(r.stdout).toMatch(/^tensorpool\s+0\s/m);
    expect(r.stdout).toMatch(/^malloc\s+0\s/m);
  });

  it('the report escapes what it prints', () => {
    const trace = syntheticTrainingTrace({ layers: 4, iterations: 2 });
    const page = replayReportHtml(
      {
        trace: '<script>alert(1)</script>',
        events: trace.eventCount,
        buffers: trace.bufferCount,
        reps: 1,
        touch: 'pages',
        lowerBoundBytes: trace.lowerBound(),
        machine: { cpus: 1, cpuModel: 'x & y', memoryBytes: 1, kernel: 'k', node: 'v' },
        plan: null,
        offsetPlan: null,
        bestPeer: null,
        results: [],
      },
      trace,
    );
    expect(page).not.toContain('<script>');
    expect(page).toContain('&lt;script&gt;');
    expect(page).toContain('x &amp; y');
  });

  it('replay() takes a path or a Trace, nothing else', async () => {
    for (const notATrace of [42, null, { ops: [] }]) {
      await expect(replay(notATrace as never, { reps: 1 })).rejects.toThrow(/replay\(\) takes a trace file's path or a Trace, got /);
    }
  });

  it('rejects bad input with one clear line and exit code 2', () => {
    expectUsageError(run('replay', path.join(tmp, 'missing.csv')), /missing\.csv: cannot read the trace: no such file/);
    expectUsageError(run('replay', transformer, '--allocators', 'tensorpool,dlmalloc'), /unknown allocator 'dlmalloc' \(known: tensorpool, tensorpool-classes, tensorpool-js, tensorpool-offsets, tensorpool-preload, malloc, jemalloc, mimalloc, tcmalloc, ideal\)/);
    expectUsageError(run('replay', transformer, '--reps', '0'), /--reps must be an integer >= 1, got "0"/);
    expectUsageError(run('replay', transformer, '--touch', 'all'), /--touch must be one of pages, full, none/);
    const badPlan = path.join(tmp, 'bad.plan.json');
    fs.writeFileSync(badPlan, JSON.stringify({ ...new Plan({ interval: 4096, classes: [{ size: 4096, blocks: 1 }] }).toJSON(), version: 7 }));
    expectUsageError(run('replay', transformer, '--plan', badPlan), /bad\.plan\.json: plan format version 7 is not supported/);
    expectUsageError(run('bench', '--trace', 'nonexistent_trace'), /nonexistent_trace: cannot read the trace: no such file/);
    expectUsageError(run('bench', 'extra'), /unexpected argument 'extra'/);
  });
});

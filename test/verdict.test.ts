/**
 * The verdict that closes `tensorpool bench` and `tensorpool replay`: a ranking in time only where the paired
 * interval excludes 1, the machine called too noisy where it does not; and, from a real replay, the lines
 * that say what each statistic is and where the preload route's requests went.
 */
import { describe, expect, it } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import type { AllocatorName, AllocatorResult, MedianInterval, ReplayReport } from '../lib/index.js';
import { replayVerdict } from '../lib/report/verdict.js';
import { run } from './helpers.js';

function result(allocator: AllocatorName, faults: number, xLowerBound: number, vsBestPeer: number, interval: Partial<MedianInterval> | null): AllocatorResult {
  return {
    allocator,
    available: true,
    steadyMinorFaultsPerRep: faults,
    rssVsLowerBound: xLowerBound,
    vsBestPeer,
    vsBestPeerInterval: interval && { median: vsBestPeer, low: vsBestPeer, high: vsBestPeer, confidence: 0.9375, ...interval },
  } as AllocatorResult;
}

function report(results: AllocatorResult[], bestPeer: AllocatorName | null = 'malloc'): ReplayReport {
  return { results, bestPeer } as ReplayReport;
}

describe('replayVerdict', () => {
  const malloc = result('malloc', 80412, 1.83, 1, { low: 1, high: 1 });

  it('heads with tensorpool against glibc: faults a repetition and memory against the lower bound', () => {
    const lines = replayVerdict(report([result('tensorpool', 0, 1.004, 0.5, { low: 0.45, high: 0.55 }), malloc, result('jemalloc', 1200, 1.2, 1.1, { low: 1.05, high: 1.2 })]));
    expect(lines[0]).toBe("tensorpool: 0 page faults a repetition, memory 1.00x the trace's lower bound; glibc malloc: 80,412 faults, 1.83x");
    expect(lines[1]).toBe('also jemalloc: 1,200 faults, 1.20x');
  });

  it('ranks a time only where the interval of the paired ratios excludes 1', () => {
    const timeOf = (interval: Partial<MedianInterval> | null, ratio = 0.9) => replayVerdict(report([result('tensorpool', 0, 1, ratio, interval), malloc])).at(-1);
    expect(timeOf({ low: 0.8, high: 0.95 })).toMatch(/^time: tensorpool faster than glibc malloc, the fastest peer here: 0.90x its time \(93% interval of the paired ratios 0.80x-0.95x\)$/);
    expect(timeOf({ low: 1.2, high: 1.5 }, 1.3)).toMatch(/^time: tensorpool slower than glibc malloc/);
    expect(timeOf({ low: 0.95, high: 1.04 }, 0.99)).toMatch(/^time: no difference measured between tensorpool and glibc malloc, the fastest peer here \(0.99x; .*holds 1\)$/);
    // Runs on a busy machine: 0.53x one time, 1.33x the next; the interval says so.
    expect(timeOf({ low: 0.2, high: 2.4 }, 0.53)).toMatch(/^time: too noisy to rank tensorpool against glibc malloc, the fastest peer here: the 93% interval of the paired ratios 0.20x-2.40x holds 1 \(a busy machine/);
    expect(timeOf({ low: 0.3, high: 0.4, confidence: 0.5 }, 0.35)).toMatch(/from too few repetitions to rank/);
    expect(timeOf(null, 0.35)).toMatch(/from too few repetitions to rank/);
  });

  it('speaks for the preload route too, and for nothing when no tensorpool row was measured', () => {
    const lines = replayVerdict(report([result('tensorpool', 0, 1, 0.5, { low: 0.4, high: 0.6 }), result('tensorpool-preload', 2.5, 1.06, 0.6, { low: 0.5, high: 0.7 }), malloc]));
    expect(lines).toHaveLength(4);
    expect(lines[1]).toBe('also tensorpool-preload: 2.5 faults, 1.06x');
    expect(lines[3]).toMatch(/^time: tensorpool-preload faster/);
    expect(replayVerdict(report([malloc]))).toEqual([]);
    expect(replayVerdict(report([result('tensorpool', 0, 1, 0.5, null)], null))).toEqual(["tensorpool: 0 page faults a repetition, memory 1.00x the trace's lower bound", 'time: no peer ran to compare with']);
  });
});

describe('tensorpool replay: what the report says about itself', () => {
  it('names each column\'s statistic, says where the preload route\'s requests went, and ends with the verdict', () => {
    // 3 requests at or above the preload library's default threshold (64 KiB), 2 below it, in each iteration.
    const sizes = [4096, 65536, 1 << 20, 1000, 200_000];
    const lines = ['op,id,size,stream'];
    for (let iteration = 0; iteration < 2; iteration++) {
      if (iteration) lines.push('i,,,');
      sizes.forEach((size, i) => lines.push(`a,${10 * iteration + i},${size},0`));
      sizes.forEach((_, i) => lines.push(`f,${10 * iteration + i},,0`));
    }
    const trace = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'tp-verdict-')), 'small.csv');
    fs.writeFileSync(trace, lines.join('\n') + '\n');
    const r = run('replay', trace, '--reps', '2', '--allocators', 'tensorpool,tensorpool-preload,malloc');
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^ +median +median +median +median +mean +one run +one run +one run$/m);
    expect(r.stdout).toMatch(/^measured .*the steady state is the last 1: times are their medians, faults their mean$/m);
    expect(r.stdout).toMatch(/^ {2}tensorpool-preload per repetition: [\d.]+ requests reached the process pool, the trace's 6 of at least 64\.0 KiB \(the threshold\) and the worker's own: .*; the trace's 4 smaller requests went to glibc's malloc$/m);
    expect(r.stdout).toMatch(/^verdict {6}tensorpool: [\d.,]+ page faults a repetition, memory [\d.]+x the trace's lower bound; glibc malloc: [\d.,]+ faults, [\d.]+x$/m);
    expect(r.stdout).toMatch(/^ {13}time: tensorpool at [\d.]+x glibc malloc's, from too few repetitions to rank/m);
  });
});

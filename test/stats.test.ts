import { describe, expect, it } from 'vitest';

import { median, medianInterval, pairedRatios, windowedGrowth } from '../lib/report/stats.js';

const oneTo = (n: number) => Array.from({ length: n }, (_, i) => i + 1);

describe('medianInterval', () => {
  it('gives the sign-test interval of the order statistics (the tables: n 20 -> 6th..15th, n 100 -> 40th..61st)', () => {
    expect(medianInterval(oneTo(20))).toMatchObject({ median: 10.5, low: 6, high: 15 });
    expect(medianInterval(oneTo(20)).confidence).toBeCloseTo(0.9586, 4);
    expect(medianInterval(oneTo(100))).toMatchObject({ low: 40, high: 61 });
  });

  it('sorts its input and leaves it alone', () => {
    const values = [9, 1, 8, 2, 7, 3, 6, 4, 5, 10];
    expect(medianInterval(values)).toMatchObject({ median: 5.5, low: 2, high: 9 });
    expect(values[0]).toBe(9);
  });

  it('reports the confidence it reached when the sample is too small for the one asked', () => {
    expect(medianInterval([3, 1, 2, 5, 4])).toEqual({ median: 3, low: 1, high: 5, confidence: 0.9375 });
    expect(medianInterval([7])).toEqual({ median: 7, low: 7, high: 7, confidence: 0 });
    expect(medianInterval([]).median).toBeNaN();
    expect(medianInterval(oneTo(20), 0.5)).toMatchObject({ low: 8, high: 13 }); // P(X <= 7) = 0.13, P(X <= 8) = 0.25
  });

  it('holds the population median at least as often as it claims (uniform samples, deterministic generator)', () => {
    let seed = 7;
    const random = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
    let covered = 0;
    const trials = 2000;
    for (let t = 0; t < trials; t++) {
      const { low, high } = medianInterval(Array.from({ length: 15 }, random));
      if (low <= 0.5 && 0.5 <= high) covered++;
    }
    expect(covered / trials).toBeGreaterThan(0.95);
  });
});

describe('pairedRatios', () => {
  it('divides pair by pair and refuses samples of different lengths', () => {
    expect(pairedRatios([2, 9], [4, 3])).toEqual([0.5, 3]);
    expect(median(pairedRatios([1, 2, 3], [1, 1, 1]))).toBe(2);
    expect(() => pairedRatios([1], [1, 2])).toThrow(/differ in length: 1 and 2/);
  });
});

describe('windowedGrowth', () => {
  const ramp = (values: number[]) => values.map((value, i) => ({ at: i, value }));

  it('compares the medians of the two windows: a lone spike or dip at either end does not decide it', () => {
    // Flat at 100 with a spike at the start mark and a dip at the end mark: the instants say -60%, the trend is 0.
    const samples = ramp([100, 100, 150, 100, 100, 100, 100, 100, 60, 100]);
    expect(windowedGrowth(samples, 2, 8, 1)).toBe(0);
    expect(samples[8].value / samples[2].value - 1).toBeCloseTo(-0.6, 10);
  });

  it('follows a real trend', () => {
    const samples = ramp([100, 100, 100, 101, 102, 103, 104, 110, 110, 110]);
    expect(windowedGrowth(samples, 1, 8, 1)).toBeCloseTo(0.1, 10);
  });

  it('is NaN when a window holds no sample, and reads only the samples it is given', () => {
    const samples = ramp([1, 2, 3]);
    expect(windowedGrowth(samples, 0, 10, 1)).toBeNaN();
    expect(windowedGrowth([], 0, 1, 1)).toBeNaN();
    expect(samples.map((s) => s.value)).toEqual([1, 2, 3]);
  });
});

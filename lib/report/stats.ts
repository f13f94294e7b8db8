/** Small statistics helpers shared by replay, benchmarks and reports. */

export function median(values: readonly number[]): number {
  return middleOf([...values].sort((a, b) => a - b));
}

function middleOf(sorted: readonly number[]): number {
  if (sorted.length === 0) return Number.NaN;
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

/** Nearest-rank quantile, q in [0, 1]. */
export function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))];
}

/** A median with a distribution-free confidence interval (order statistics of the sample). */
export interface MedianInterval {
  median: number;
  low: number;
  high: number;
  /** The interval's confidence as achieved: small samples cannot reach the one asked for (5 values: 0.9375). */
  confidence: number;
}

/**
 * The median of `values` and the narrowest interval [x(k), x(n+1-k)] of its order statistics that holds the
 * population median with probability >= `confidence` (the binomial sign-test interval: no assumption about
 * the distribution, which for timings on a shared machine is skewed and shifts). With too few values for
 * that confidence, the whole range and the confidence it has.
 */
export function medianInterval(values: readonly number[], confidence = 0.95): MedianInterval {
  const n = values.length;
  if (n === 0) return { median: Number.NaN, low: Number.NaN, high: Number.NaN, confidence: 0 };
  const sorted = [...values].sort((a, b) => a - b);
  // P(X < k) for X ~ Binomial(n, 1/2), k = 1, 2, ...: the interval from the k-th value misses the median
  // with probability 2 P(X < k).
  let k = 1;
  let below = 0.5 ** n; // P(X <= k - 1)
  let term = below;
  while (k < n + 1 - k) {
    const nextTerm = (term * (n - (k - 1))) / k; // P(X = k)
    if (1 - 2 * (below + nextTerm) < confidence) break;
    term = nextTerm;
    below += nextTerm;
    k++;
  }
  return { median: middleOf(sorted), low: sorted[k - 1], high: sorted[n - k], confidence: Math.max(0, 1 - 2 * below) };
}

/** Element-wise a[i] / b[i] of two paired samples (measured alternately), for medianInterval. */
export function pairedRatios(a: readonly number[], b: readonly number[]): number[] {
  if (a.length !== b.length) throw new RangeError(`paired samples differ in length: ${a.length} and ${b.length}`);
  return a.map((x, i) => x / b[i]);
}

/** One sample of a quantity over a run: `at` how far the run had got (requests done, say), `value` the quantity then. */
export interface ProgressSample {
  at: number;
  value: number;
}

/**
 * The growth of a sampled quantity from `from` to `to` (in the samples' `at` units) that no single sample's
 * moment decides: the median of the samples within `halfWidth` of `to` over the median of those within
 * `halfWidth` of `from`, minus 1. A process's RSS read at one instant moves with where that instant falls
 * (a garbage collection under way, memory given back a moment later), so two instants can differ by more
 * than the trend between them. NaN when either window holds no sample.
 */
export function windowedGrowth(samples: readonly ProgressSample[], from: number, to: number, halfWidth: number): number {
  const around = (centre: number) => samples.filter((s) => Math.abs(s.at - centre) <= halfWidth).map((s) => s.value);
  const start = around(from);
  const end = around(to);
  if (start.length === 0 || end.length === 0) return Number.NaN;
  return median(end) / median(start) - 1;
}

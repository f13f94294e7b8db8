/**
 * Longer runs from short recordings: a trace of a few training steps (or a cycle of input shapes), with
 * its last step (or cycle) repeated as a loop would repeat it. Buffers that cross the boundary (gradients
 * kept until the next step's zero_grad, a loss freed after the mark, the next input made before the mark)
 * are re-linked so that every copy frees what the copy before it left live, just as the recorded step
 * freed what its predecessor left.
 */
import { checkInteger, describe, invalidArgument } from '../validate.js';
import { MAX_SYNTHETIC_EVENTS } from './synthetic.js';
import { EventOp, noAnomalies, Trace, TraceBuilder } from './trace.js';

/**
 * Iterations 1…k of `trace` as recorded, then iteration k `copies` more times: `k + copies` iterations.
 *
 * Iteration k frees some buffers of iteration k−1 (its carry-in) and leaves some of its own live (its
 * carry-out). Carry-outs are matched to carry-ins in allocation order by size; in every copy a freed
 * carry-in becomes the matching carry-out of the copy before. A carry-in with no match is not freed in
 * the copies; a carry-out with no match is freed at the end of the next copy, so nothing accumulates.
 */
export function repeatIteration(trace: Trace, k: number, copies: number): Trace {
  if (!(trace instanceof Trace)) throw invalidArgument('type', `repeatIteration() takes a Trace, got ${describe(trace)}`);
  checkInteger(k, 'iteration', 1, trace.iterations);
  checkInteger(copies, 'copies', 0);
  return repeatIterations(trace, k, k, copies);
}

/**
 * Iterations 1…last as recorded, then iterations first…last, as one block, `copies` more times: as
 * repeatIteration does for one iteration, with the block's carry-ins (buffers of the iteration before
 * `first` that the block frees) and carry-outs (buffers the block allocates and leaves live).
 * Pre: 1 <= first <= last <= trace.iterations.
 */
export function repeatIterations(trace: Trace, first: number, last: number, copies: number): Trace {
  const { from, to, allocatedIn, successor, unmatchedOut } = carryOver(trace, first, last);
  const what = first === last ? `iteration ${last}` : `iterations ${first}-${last}`;
  if (trace.ops.length + copies * (to - from + 1) > MAX_SYNTHETIC_EVENTS) {
    throw invalidArgument('range', `${copies} copies of ${what} would make more than ${MAX_SYNTHETIC_EVENTS} events`);
  }

  const builder = new TraceBuilder();
  // Iterations 1…last as recorded. `copy` maps the original buffers of the block to those of the last copy.
  let copy = new Map<number, number>();
  const original = new Map<number, number>();
  for (let e = 0; e < to; e++) {
    const op = trace.ops[e];
    const b = trace.eventBuffer[e];
    if (op === EventOp.Iteration) {
      builder.mark();
    } else if (op === EventOp.Alloc) {
      const mapped = builder.alloc(trace.sizes[b], trace.eventStream[e]);
      original.set(b, mapped);
      if (e >= from) copy.set(b, mapped);
    } else {
      builder.free(original.get(b)!, trace.eventStream[e]);
    }
  }
  // The iterations after the block as recorded are left out: what they would have freed stays live into
  // the copies only through carry-outs, which the copies free.
  for (let c = 0; c < copies; c++) {
    builder.mark();
    const previous = copy;
    copy = new Map<number, number>();
    for (let e = from; e < to; e++) {
      const op = trace.ops[e];
      const b = trace.eventBuffer[e];
      if (op === EventOp.Iteration) {
        builder.mark();
      } else if (op === EventOp.Alloc) {
        copy.set(b, builder.alloc(trace.sizes[b], trace.eventStream[e]));
      } else if (allocatedIn[b] === 0) {
        builder.free(copy.get(b)!, trace.eventStream[e]);
      } else if (successor.has(b)) {
        builder.free(previous.get(successor.get(b)!)!, trace.eventStream[e]);
      }
    }
    for (const out of unmatchedOut) builder.free(previous.get(out)!, 0);
  }
  return builder.build(`${trace.name} (${what} repeated ${copies}x)`, trace.format, noAnomalies());
}

/** What crosses into and out of a block of iterations, and which carry-out plays which carry-in's part. */
interface CarryOver {
  from: number; // the block's first event
  to: number; // one past its last (its closing mark excluded)
  allocatedIn: Int8Array; // per buffer: 0 allocated in the block, -1 in the iteration before, -2 elsewhere
  successor: Map<number, number>; // carry-in -> the carry-out playing its part one repetition later
  unmatchedOut: number[]; // carry-outs with no carry-in of their size to follow
}

/**
 * Carry-ins of iterations first…last (allocated in the iteration before, freed in the block) and their
 * carry-outs (allocated in the block, not freed in it), matched in allocation order by size.
 */
function carryOver(trace: Trace, first: number, last: number): CarryOver {
  const from = trace.iterationStarts[first - 1];
  const to = trace.iterationEnd(last);
  const previousFrom = first > 1 ? trace.iterationStarts[first - 2] : from;
  const allocatedIn = new Int8Array(trace.bufferCount).fill(-2);
  const freedInBlock = new Uint8Array(trace.bufferCount);
  for (let e = previousFrom; e < to; e++) {
    const b = trace.eventBuffer[e];
    if (trace.ops[e] === EventOp.Alloc) allocatedIn[b] = e >= from ? 0 : -1;
    else if (trace.ops[e] === EventOp.Free && e >= from) freedInBlock[b] = 1;
  }
  const carryIn: number[] = [];
  const carryOut: number[] = [];
  for (let e = previousFrom; e < to; e++) {
    if (trace.ops[e] !== EventOp.Alloc) continue;
    const b = trace.eventBuffer[e];
    if (allocatedIn[b] === -1 && freedInBlock[b]) carryIn.push(b);
    if (allocatedIn[b] === 0 && !freedInBlock[b]) carryOut.push(b);
  }
  const successor = new Map<number, number>();
  const unmatchedOut: number[] = [];
  let next = 0;
  for (const out of carryOut) {
    let i = next;
    while (i < carryIn.length && trace.sizes[carryIn[i]] !== trace.sizes[out]) i++;
    if (i < carryIn.length) {
      successor.set(carryIn[i], out);
      next = i + 1;
    } else {
      unmatchedOut.push(out);
    }
  }
  return { from, to, allocatedIn, successor, unmatchedOut };
}

/**
 * The pairs of buffers that are live together only once the last `cycle` iterations repeat as a block: a
 * carry-out of the block (live across its end) against each buffer the next repetition of the block
 * allocates before freeing the carry-in whose part that carry-out plays (all of them, for a carry-out with
 * no such carry-in). A layout that serves the repetition from the same schedules must keep these apart
 * as well as the pairs whose lifetimes overlap. `[a0, b0, a1, b1, …]`. Null when there would be more than
 * `maxPairs` (a process recorded from its start, with thousands of buffers it never frees, pairs each with
 * every allocation of the iteration: hundreds of millions, beyond what a layout can use or an array hold).
 */
export function wrapAroundConflicts(trace: Trace, cycle = 1, maxPairs = MAX_WRAP_AROUND_PAIRS): Uint32Array | null {
  const { from, to, successor, unmatchedOut } = carryOver(trace, trace.iterations - cycle + 1, trace.iterations);
  const freedBefore = new Map<number, number>(unmatchedOut.map((out) => [out, to]));
  const allocated: number[] = [];
  const allocatedAt: number[] = [];
  for (let e = from; e < to; e++) {
    const b = trace.eventBuffer[e];
    if (trace.ops[e] === EventOp.Alloc) {
      allocated.push(b);
      allocatedAt.push(e);
    } else if (trace.ops[e] === EventOp.Free && successor.has(b)) {
      freedBefore.set(successor.get(b)!, e);
    }
  }
  // At most one pair per allocation before `until`: counted first, so that no quadratic list is built.
  let bound = 0;
  for (const until of freedBefore.values()) bound += countBelow(allocatedAt, until);
  if (bound > maxPairs) return null;
  const pairs: number[] = [];
  for (const [out, until] of freedBefore) {
    for (let i = 0; i < allocated.length && allocatedAt[i] < until; i++) {
      // Already apart: the carry-out itself, and buffers whose lifetimes overlap its own as recorded.
      if (allocated[i] !== out && trace.ends[allocated[i]] <= trace.starts[out]) pairs.push(out, allocated[i]);
    }
  }
  return Uint32Array.from(pairs);
}

/** More pairs to keep apart than a repeating layout is tried with (wrapAroundConflicts). */
export const MAX_WRAP_AROUND_PAIRS = 1 << 22;

/** How many of the ascending `values` are below `limit`. */
function countBelow(values: readonly number[], limit: number): number {
  let lo = 0;
  let hi = values.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (values[mid] < limit) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/**
 * Whether a tensor of the last iteration outlives it when it repeats: a carry-out still live when the next
 * repetition allocates its own part (or one that nothing frees then). Its two parts need blocks of their
 * own, so a plan serving the repetition alternates two iterations (PlanSchedule.cycle = 2).
 */
export function outlivesIteration(trace: Trace): boolean {
  const k = trace.iterations;
  const { from, to, successor, unmatchedOut } = carryOver(trace, k, k);
  if (unmatchedOut.length > 0) return true;
  const allocatedAt = new Map<number, number>();
  for (let e = from; e < to; e++) {
    const b = trace.eventBuffer[e];
    if (trace.ops[e] === EventOp.Alloc) allocatedAt.set(b, e);
    else if (trace.ops[e] === EventOp.Free && successor.has(b) && allocatedAt.has(successor.get(b)!)) return true;
  }
  return false;
}

/**
 * How many iterations the trace's pattern repeats after: the smallest p for which each of the last p
 * iterations asked for the same sizes (as a multiset: threads may reorder them) as the iteration p before
 * it. 1 for a training loop's identical steps; the number of input shapes for a recorded cycle of them (the
 * session's creation first). Where no p repeats exactly, the smallest p whose iterations differ from those
 * p before by at most 2% of their allocations: a process recorded from its start (`tensorpool run
 * --record`) also records its first cycle's one-off allocations (buffers made once and kept, outputs
 * learned), and only the last p iterations are laid out to repeat. 0 when no such p exists.
 */
export function repeatingPeriod(trace: Trace): number {
  const patterns = iterationPatterns(trace);
  const n = patterns.length;
  const periodWithin = (tolerance: number): number => {
    for (let p = 1; 2 * p <= n; p++) {
      let repeats = true;
      for (let i = n - p; i < n && repeats; i++) {
        const a = patterns[i];
        const b = patterns[i - p];
        repeats = multisetDifference(a, b) <= Math.floor(tolerance * Math.max(a.length, b.length));
      }
      if (repeats) return p;
    }
    return 0;
  };
  return periodWithin(0) || periodWithin(0.02);
}

/** The requested sizes of each iteration from `from` on, sorted (a multiset: threads may reorder them). */
function iterationPatterns(trace: Trace, from = 0): number[][] {
  const firsts = trace.iterationFirstBuffers();
  const n = firsts.length;
  return firsts.slice(from).map((start, k) => {
    const i = from + k;
    return Array.from(trace.sizes.subarray(start, i + 1 < n ? firsts[i + 1] : trace.bufferCount)).sort((a, b) => a - b);
  });
}

/** The iterations keepsChanging looks at (the last ones), and the element comparisons it may spend. */
const CHANGING_WINDOW = 256;
const CHANGING_BUDGET = 50_000_000;

/**
 * Whether the trace's iterations keep asking for mixes of sizes asked for once only: requests of random
 * shapes overlapping at random in a service, say, where each busy period is a new mix. A plan's schedule
 * serves the iterations it was trained on, in any order, and a time-shared layout has no room for one it
 * has not seen (its blocks are found busy and the pool grows). Judged on the last CHANGING_WINDOW
 * iterations after the first (the process's start: a session's creation), the last one left out when it
 * was cut short (fewer allocations than the one before, a mix of its own: what a recording holds after its
 * last mark): true when there are at least 4 and fewer than 90% of them ask for the sizes of another one
 * (within 2% of their allocations, as repeatingPeriod allows). A training loop's steps, a cycle of
 * shapes, and a set of shapes coming in any order repeat. False when telling would take more than
 * CHANGING_BUDGET comparisons (iterations of many distinct allocations each).
 */
export function keepsChanging(trace: Trace): boolean {
  if (trace.iterations < 5) return false; // the first and at most the last left out: fewer than 4
  let window = iterationPatterns(trace, Math.max(1, trace.iterations - CHANGING_WINDOW));
  let budget = CHANGING_BUDGET;
  const same = (a: readonly number[], b: readonly number[]): boolean => {
    const most = Math.floor(0.02 * Math.max(a.length, b.length));
    if (Math.abs(a.length - b.length) > most) return false;
    budget -= a.length + b.length;
    return multisetDifference(a, b) <= most;
  };
  const repeated = (i: number): boolean => window.some((b, j) => j !== i && budget > 0 && same(window[i], b));
  const last = window.length - 1;
  if (last >= 1 && window[last].length < window[last - 1].length && !repeated(last)) window = window.slice(0, last);
  if (window.length < 4) return false;
  let repeats = 0;
  for (let i = 0; i < window.length; i++) if (repeated(i)) repeats++;
  return budget > 0 && repeats < 0.9 * window.length;
}

/** How many elements two sorted lists do not have in common (the size of their multisets' symmetric difference). */
function multisetDifference(a: readonly number[], b: readonly number[]): number {
  let i = 0;
  let j = 0;
  let common = 0;
  while (i < a.length && j < b.length) {
    if (a[i] === b[j]) {
      common++;
      i++;
      j++;
    } else if (a[i] < b[j]) i++;
    else j++;
  }
  return a.length + b.length - 2 * common;
}

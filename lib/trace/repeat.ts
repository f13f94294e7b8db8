/**
 * Longer runs from short recordings: a trace of a few training steps, with one step repeated as a
 * training loop would repeat it. Buffers that cross an iteration boundary (gradients kept until the next
 * step's zero_grad, a loss freed after the mark) are re-linked so that every copy frees what the copy
 * before it left live, just as the recorded step freed what its predecessor left.
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
  const { from, to, allocatedIn, successor, unmatchedOut } = carryOver(trace, k, k);
  if (trace.ops.length + copies * (to - from + 1) > MAX_SYNTHETIC_EVENTS) {
    throw invalidArgument('range', `${copies} copies of iteration ${k} would make more than ${MAX_SYNTHETIC_EVENTS} events`);
  }

  const builder = new TraceBuilder();
  // Iterations 1…k as recorded. `copy` maps the original buffers of iteration k to those of the last copy.
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
  // The iterations after k as recorded are left out: what they would have freed stays live into the copies
  // only through carry-outs, which the copies free.
  for (let c = 0; c < copies; c++) {
    builder.mark();
    const previous = copy;
    copy = new Map<number, number>();
    for (let e = from; e < to; e++) {
      const op = trace.ops[e];
      const b = trace.eventBuffer[e];
      if (op === EventOp.Alloc) {
        copy.set(b, builder.alloc(trace.sizes[b], trace.eventStream[e]));
      } else if (op === EventOp.Free) {
        if (allocatedIn[b] === 0) builder.free(copy.get(b)!, trace.eventStream[e]);
        else if (successor.has(b)) builder.free(previous.get(successor.get(b)!)!, trace.eventStream[e]);
      }
    }
    for (const out of unmatchedOut) builder.free(previous.get(out)!, 0);
  }
  return builder.build(`${trace.name} (iteration ${k} repeated ${copies}x)`, trace.format, noAnomalies());
}

/** What crosses into one iteration and out of another, and which carry-out plays which carry-in's part. */
interface CarryOver {
  from: number; // iteration `out`'s first event
  to: number; // one past its last (its closing mark excluded)
  allocatedIn: Int8Array; // per buffer: 0 allocated in iteration `out`, -1 in the one before, -2 elsewhere
  successor: Map<number, number>; // carry-in of iteration `into` -> the carry-out of `out` playing its part
  unmatchedOut: number[]; // carry-outs with no carry-in of their size to follow
}

/**
 * Carry-ins of iteration `into` (allocated in the one before, freed in it) and carry-outs of iteration
 * `out` (allocated in it, not freed in it), matched in allocation order by size. With into = out = k, the
 * carry-outs of k take the parts of k's carry-ins when k repeats.
 */
function carryOver(trace: Trace, into: number, out: number): CarryOver {
  const carryIn = carriedInto(trace, into);
  const [from, to] = iterationSpan(trace, out);
  const previousFrom = out > 1 ? trace.iterationStarts[out - 2] : from;
  const allocatedIn = new Int8Array(trace.bufferCount).fill(-2);
  const freedInK = new Uint8Array(trace.bufferCount);
  for (let e = previousFrom; e < to; e++) {
    const b = trace.eventBuffer[e];
    if (trace.ops[e] === EventOp.Alloc) allocatedIn[b] = e >= from ? 0 : -1;
    else if (trace.ops[e] === EventOp.Free && e >= from) freedInK[b] = 1;
  }
  const carryOut: number[] = [];
  for (let e = from; e < to; e++) {
    const b = trace.eventBuffer[e];
    if (trace.ops[e] === EventOp.Alloc && !freedInK[b]) carryOut.push(b);
  }
  const successor = new Map<number, number>();
  const unmatchedOut: number[] = [];
  let next = 0;
  for (const b of carryOut) {
    let i = next;
    while (i < carryIn.length && trace.sizes[carryIn[i]] !== trace.sizes[b]) i++;
    if (i < carryIn.length) {
      successor.set(carryIn[i], b);
      next = i + 1;
    } else {
      unmatchedOut.push(b);
    }
  }
  return { from, to, allocatedIn, successor, unmatchedOut };
}

/** The buffers iteration k frees that the iteration before it allocated, in allocation order. */
function carriedInto(trace: Trace, k: number): number[] {
  if (k === 1) return [];
  const [from, to] = iterationSpan(trace, k);
  const previousFrom = trace.iterationStarts[k - 2];
  const freedInK = new Uint8Array(trace.bufferCount);
  for (let e = from; e < to; e++) if (trace.ops[e] === EventOp.Free) freedInK[trace.eventBuffer[e]] = 1;
  const carryIn: number[] = [];
  for (let e = previousFrom; e < from; e++) {
    if (trace.ops[e] === EventOp.Alloc && freedInK[trace.eventBuffer[e]]) carryIn.push(trace.eventBuffer[e]);
  }
  return carryIn;
}

/** Iteration k's events: [first, one past the last), its closing mark excluded. */
function iterationSpan(trace: Trace, k: number): [number, number] {
  return [trace.iterationStarts[k - 1], k < trace.iterations ? trace.iterationStarts[k] - 1 : trace.ops.length];
}

/**
 * The pairs of buffers that are live together only once the last `cycle` iterations repeat in turn: a
 * carry-out of the last iteration (live across its end) against each buffer the first iteration of the
 * cycle allocates before freeing the carry-in whose part that carry-out plays (all of them, for a carry-out
 * with no such carry-in). A layout that serves the repetition from the same schedules must keep these
 * apart as well as the pairs whose lifetimes overlap. `[a0, b0, a1, b1, …]`.
 */
export function wrapAroundConflicts(trace: Trace, cycle = 1): Uint32Array {
  const first = trace.iterations - cycle + 1;
  const { successor, unmatchedOut } = carryOver(trace, first, trace.iterations);
  const [from, to] = iterationSpan(trace, first);
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
  const pairs: number[] = [];
  for (const [out, until] of freedBefore) {
    for (let i = 0; i < allocated.length && allocatedAt[i] < until; i++) {
      // Already apart: the carry-out itself, and buffers whose lifetimes overlap its own as recorded.
      if (allocated[i] !== out && trace.ends[allocated[i]] <= trace.starts[out]) pairs.push(out, allocated[i]);
    }
  }
  return Uint32Array.from(pairs);
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

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
  const from = trace.iterationStarts[k - 1];
  const to = k < trace.iterations ? trace.iterationStarts[k] - 1 : trace.ops.length; // minus the mark
  if (trace.ops.length + copies * (to - from + 1) > MAX_SYNTHETIC_EVENTS) {
    throw invalidArgument('range', `${copies} copies of iteration ${k} would make more than ${MAX_SYNTHETIC_EVENTS} events`);
  }
  const previousFrom = k > 1 ? trace.iterationStarts[k - 2] : from;

  // Which iteration allocated each buffer (relative to k: 0 this one, -1 the one before, -2 older).
  const allocatedIn = new Int8Array(trace.bufferCount).fill(-2);
  const freedInK = new Uint8Array(trace.bufferCount);
  for (let e = previousFrom; e < to; e++) {
    const b = trace.eventBuffer[e];
    if (trace.ops[e] === EventOp.Alloc) allocatedIn[b] = e >= from ? 0 : -1;
    else if (trace.ops[e] === EventOp.Free && e >= from) freedInK[b] = 1;
  }
  const carryIn: number[] = [];
  const carryOut: number[] = [];
  for (let e = previousFrom; e < to; e++) {
    if (trace.ops[e] !== EventOp.Alloc) continue;
    const b = trace.eventBuffer[e];
    if (allocatedIn[b] === -1 && freedInK[b]) carryIn.push(b);
    if (allocatedIn[b] === 0 && !freedInK[b]) carryOut.push(b);
  }
  // carry-in buffer -> the carry-out buffer playing its part one iteration later
  const successor = new Map<number, number>();
  let next = 0;
  const unmatchedOut: number[] = [];
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

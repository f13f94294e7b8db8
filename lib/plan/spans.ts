/**
 * The spans kind of plan: what the default classes' spans (the process pool's zero-config route,
 * native/core/span_heap.h) hold when they serve a recording, measured by replaying it through them. train()
 * compares that with what a plan of blocks holds and keeps whichever holds less; a plan of this kind
 * carries the spans' working set as the bytes `tensorpool run --plan` carves up front and keeps once written.
 */
import { native } from '../native.js';
import { EventOp, TraceBuilder, type Trace } from '../trace/trace.js';

/** What the spans held serving a trace. */
export interface SpansReplay {
  /** Bytes of arena the spans carved (their peak: an arena never shrinks what it carved). */
  carvedBytes: number;
  /** Requests the spans could not serve (the replay's reservation spent): the measure is then not valid. */
  osFallbacks: number;
}

/** The most address space a replay reserves (the process pool's default reservation). */
const MAX_REPLAY_RESERVE = 2 ** 34;

/**
 * Replays `trace` (its allocations and frees in recorded order, iteration marks included) through a pool of
 * the default classes serving large requests from spans, as the process pool does with no plan; nothing is
 * written into the blocks (the bookkeeping alone decides what is carved). Decay plays no part: a replay
 * runs in far less time than an epoch.
 */
export function replayThroughSpans(trace: Trace): SpansReplay {
  let total = 0;
  for (let b = 0; b < trace.sizes.length; b++) total += Math.ceil(trace.sizes[b] / 4096 + 1) * 4096;
  // Every request carved anew, with a page apart, fits: the reservation never runs out before the trace does.
  const growReserve = Math.min(MAX_REPLAY_RESERVE, total + 2 ** 20);
  const pool = new native.NativePool(null, {
    prefault: false,
    hugePages: false,
    lock: false,
    grow: true,
    spans: true,
    growReserve,
    osMapThreshold: 2 ** 52,
  });
  try {
    new native.NativeReplayer(pool, trace.ops, trace.eventBuffer, trace.sizes, { touch: 'none', iterationMarks: true }).run(false);
    const s = pool.stats();
    return { carvedBytes: s.arenaBytes, osFallbacks: s.osFallbacks + s.osOversize };
  } finally {
    pool.close();
  }
}

/**
 * The trace as served once its start-up is over: what was allocated before the first iteration mark (a
 * session's creation) and is still live at it, allocated first, then every event from that mark on. Its
 * replay carves what serving needs beside what start-up keeps, without start-up's passing peak (model
 * loading), which the Node hook gives back with a trim once the session is made. A trace with no mark is
 * returned as it is.
 */
export function servingPart(trace: Trace): Trace {
  const ops = trace.ops;
  const firstMark = ops.indexOf(EventOp.Iteration);
  if (firstMark < 0) return trace;
  const builder = new TraceBuilder();
  const mapped = new Map<number, number>();
  const freedBefore = new Set<number>();
  for (let e = 0; e < firstMark; e++) if (ops[e] === EventOp.Free) freedBefore.add(trace.eventBuffer[e]);
  for (let e = 0; e < firstMark; e++) {
    const b = trace.eventBuffer[e];
    if (ops[e] === EventOp.Alloc && !freedBefore.has(b)) mapped.set(b, builder.alloc(trace.sizes[b], trace.eventStream[e]));
  }
  for (let e = firstMark; e < ops.length; e++) {
    const b = trace.eventBuffer[e];
    if (ops[e] === EventOp.Iteration) builder.mark();
    else if (ops[e] === EventOp.Alloc) mapped.set(b, builder.alloc(trace.sizes[b], trace.eventStream[e]));
    else if (mapped.has(b)) builder.free(mapped.get(b)!, trace.eventStream[e]);
  }
  return builder.build(`${trace.name} (serving)`, trace.format);
}

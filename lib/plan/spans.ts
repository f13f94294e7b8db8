/**
 * The spans kind of plan: what the default classes' spans (the process pool's zero-config route,
 * native/core/span_heap.h) hold when they serve a recording, measured by replaying it through them. train()
 * compares that with what a plan of blocks holds and keeps whichever holds less; a plan of this kind
 * carries the spans' working set as the bytes `tensorpool run --plan` carves and pre-faults up front.
 */
import { native } from '../native.js';
import type { Trace } from '../trace/trace.js';

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

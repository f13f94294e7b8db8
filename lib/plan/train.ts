/**
 * train(trace) → Plan: S0's allocation information from a recorded iteration (native hot loop in
 * native/train/train.cc; this side validates, chooses the interval and describes the result).
 */
import { TensorPoolError } from '../errors.js';
import { native } from '../native.js';
import { Plan } from './plan.js';
import { arenaBytesOf, classBytesOf, PLAN_SERVES, toNativePlan, type PlanServe, type PlanSpec } from './plan-spec.js';
import { replayThroughSpans, servingPart } from './spans.js';
import { keepsChanging, outlivesIteration, repeatingPeriod, repeatIteration, repeatIterations, wrapAroundConflicts } from '../trace/repeat.js';
import { MAX_SYNTHETIC_EVENTS } from '../trace/synthetic.js';
import { Trace } from '../trace/trace.js';
import { checkBoolean, checkInteger, checkOneOf, checkOptions, describe, invalidArgument } from '../validate.js';

/** The order S0 places tensors in: by allocation time, or by size, largest first. */
export type TrainOrder = 'alloc-time' | 'size-desc';
/** 'auto' trains in both orders and keeps the plan with the fewest arena bytes. */
export const TRAIN_ORDERS: readonly (TrainOrder | 'auto')[] = ['alloc-time', 'size-desc', 'auto'];

/** The intervals `interval: 'auto'` tries: 512 B to 64 KiB. */
export const AUTO_INTERVALS: readonly number[] = [512, 1024, 2048, 4096, 8192, 16384, 32768, 65536];
/**
 * What 'auto' tries first on a trace with requests below 512 B (a process recorded at a low threshold):
 * in classes of 512 B, a 24-byte request wastes 95% of its block (a torch training step recorded with
 * `--min-bytes 1`: 3.7x the lower bound with 512, 2.2x with 64).
 */
export const SMALL_AUTO_INTERVALS: readonly number[] = [64, 128, 256];

/** The intervals 'auto' tries on this trace. */
export function autoIntervals(trace: Trace): number[] {
  const sizes = trace.sizes;
  for (let b = 0; b < sizes.length; b++) {
    if (sizes[b] < AUTO_INTERVALS[0]) return [...SMALL_AUTO_INTERVALS, ...AUTO_INTERVALS];
  }
  return [...AUTO_INTERVALS];
}

/** Options of train(). */
export interface TrainOptions {
  /**
   * Sizes are rounded up to a multiple of this to name their class (S0). 'auto' (the default) trains once
   * per candidate interval and keeps the plan with the fewest arena bytes.
   */
  interval?: number | 'auto';
  /**
   * Order tensors are visited in (S0's preset traversal order): 'alloc-time' (default) or 'size-desc';
   * 'auto' trains in both and keeps the plan with the fewest arena bytes.
   */
  order?: TrainOrder | 'auto';
  /** Train on one iteration (1-based) or on the whole trace. Default 'all'. */
  iteration?: number | 'all';
  /** The intervals 'auto' tries. Default AUTO_INTERVALS, after SMALL_AUTO_INTERVALS when the trace has requests below 512 B. */
  candidates?: number[];
  /**
   * Beyond S0: after S0 has placed every tensor, lower the arena by moving tensors between classes
   * (native/train/refine.h): a class needs only as many blocks as it has tensors living at once, and a tensor
   * living at a class's peak may move to another class at least its size that has room then (or to a
   * smaller one given a block, when that costs less than the block saved). Default: true with order
   * 'auto', false otherwise (S0 literally). Skipped, and said so per candidate, when the trace is too large.
   */
  refine?: boolean;
  /**
   * Time-shared blocks (issue 13; native/train/share.h): also lay every tensor out as a block of its own class at
   * an offset (an offset planner, greedy by size), tensors of one class at one offset sharing a block, so
   * that blocks whose uses never overlap in time share memory. 'auto' keeps the time-shared plan when its
   * arena is at least SHARE_GAIN smaller than the class plan's (taking a time-shared block also reads the
   * live flags of the blocks sharing its memory), it serves the trace's last iteration repeated, and the
   * iterations do not keep asking for new mixes of sizes (keepsChanging: a service's overlapping requests)
   * (the default); true keeps the smaller of the two that serves; false trains class plans only.
   */
  share?: boolean | 'auto';
  /**
   * How `tensorpool run --plan` is to serve the plan (PlanServe): 'classes', its blocks; 'spans', the default
   * classes' spans with their working set on the trace kept resident; 'auto' (the default) replays the trace
   * through the spans and keeps the spans kind when they carve less than the best plan of blocks holds
   * (requests that overlap at random, each busy period a new mix of sizes), else the blocks.
   */
  serve?: PlanServe | 'auto';
}

/** 'auto' keeps a time-shared plan when its arena is at most this fraction of the class plan's. */
export const SHARE_GAIN = 0.98;

/** One training run (one interval, one order). */
export interface TrainCandidate {
  interval: number;
  /**
   * The traversal order of S0, or 'time-shared' for a time-shared layout ('time-shared-repeating': one laid
   * out again to serve its last iteration repeated, wrapAroundConflicts).
   */
  order: TrainOrder | 'time-shared' | 'time-shared-repeating';
  classes: number;
  blocks: number;
  classBytes: number;
  arenaBytes: number;
  /** arenaBytes / lower bound. */
  ratio: number;
  /** Tensors placed in a block of a larger class than their own. */
  borrows: number;
  trainMs: number;
  /** Whether refinement ran, and the arena S0 alone gave (before refinement). */
  refined: boolean;
  literalArenaBytes: number;
}

/** Whether a candidate is a time-shared layout (either kind), not size classes. */
export function isTimeShared(candidate: TrainCandidate): boolean {
  return candidate.order === 'time-shared' || candidate.order === 'time-shared-repeating';
}

const TRAIN_OPTIONS = ['interval', 'order', 'iteration', 'candidates', 'refine', 'share', 'serve'] as const;

/** The buffers S0 trains on: those of one iteration or of the whole trace. */
function trainingSet(trace: Trace, iteration: number | 'all'): Trace {
  return iteration === 'all' ? trace : trace.iteration(iteration);
}

interface TrainRun {
  spec: PlanSpec;
  candidate: TrainCandidate;
}

/** One S0 run per interval (run in parallel by the native trainer), each refined when asked. */
export function trainEachInterval(trace: Trace, intervals: number[], order: TrainOrder, refine = false): TrainRun[] {
  const results = native.trainSizeClasses(trace.sizes, trace.starts, trace.ends, Float64Array.from(intervals), order, refine);
  const lowerBound = trace.lowerBound();
  const iterations = trace.iterationFirstBuffers();
  return results.map((result, i) => {
    const interval = intervals[i];
    const spec: PlanSpec = {
      interval,
      classes: Array.from(result.sizes, (size, c) => ({ size, blocks: result.blocks[c] })),
      // Buffers are numbered in allocation order, so S0's placement per buffer is the pool's schedule.
      schedule: { sizes: trace.sizes, classes: result.classOf, iterations },
    };
    const arenaBytes = arenaBytesOf(spec);
    const literal = result.refined
      ? { interval, classes: Array.from(result.literalSizes!, (size, c) => ({ size, blocks: result.literalBlocks![c] })) }
      : spec;
    return {
      spec,
      candidate: {
        interval,
        order,
        classes: spec.classes.length,
        blocks: spec.classes.reduce((n, c) => n + c.blocks, 0),
        classBytes: classBytesOf(spec),
        arenaBytes,
        ratio: lowerBound > 0 ? arenaBytes / lowerBound : 0,
        borrows: result.borrows,
        trainMs: result.ms,
        refined: result.refined,
        literalArenaBytes: arenaBytesOf(literal),
      },
    };
  });
}

/** How long a time-shared layout may search beyond greedy by size (when that ends above the bound). */
export const SHARE_SEARCH_MS = 250;
/**
 * How long greedy by size may take to lay a time-shared plan out before training keeps the size-class
 * plan: it visits, per tensor, every placed tensor live beside it (a process recorded from its start with a
 * threshold of 1 byte: 454k tensors, thousands never freed, 117 s). Generous, so that the plan a trace gets
 * does not depend on the machine: a synthetic training trace of 1M events takes 1.7-1.9 s here.
 */
export const SHARE_LAYOUT_MS = 10_000;

/**
 * One time-shared layout per interval (native/train/share.h), greedy by size; with searchMs, the planners' best
 * search then gets that long on each interval whose greedy layout ends more than 1% above the bound. With
 * `extraConflicts`, the layout keeps those pairs apart too (planned over the conflict graph).
 */
export function trainTimeSharedEach(trace: Trace, intervals: number[], searchMs = 0, extraConflicts?: Uint32Array, layoutMs = SHARE_LAYOUT_MS): TrainRun[] {
  const extra = extraConflicts && Float64Array.from(extraConflicts);
  const results = native.trainTimeShared(trace.sizes, trace.starts, trace.ends, Float64Array.from(intervals), searchMs, extra, layoutMs);
  const lowerBound = trace.lowerBound();
  const iterations = trace.iterationFirstBuffers();
  const runs: TrainRun[] = [];
  results.forEach((result, i) => {
    if (!result) return;
    const spec: PlanSpec = {
      interval: intervals[i],
      classes: Array.from(result.sizes, (size, c) => ({ size, blocks: result.blocks[c] })),
      schedule: { sizes: trace.sizes, classes: result.classOf, blocks: result.blockOf, iterations },
      layout: { classes: result.blockClass, offsets: result.blockOffset },
    };
    runs.push({
      spec,
      candidate: {
        interval: intervals[i],
        order: 'time-shared',
        classes: spec.classes.length,
        blocks: result.blockClass.length,
        classBytes: classBytesOf(spec),
        arenaBytes: result.arenaBytes,
        ratio: lowerBound > 0 ? result.arenaBytes / lowerBound : 0,
        borrows: 0,
        trainMs: result.ms,
        refined: false,
        literalArenaBytes: result.arenaBytes,
      },
    });
  });
  return runs;
}

/** The program every trace was recorded from, when they say and agree (the preload library matches it). */
function programOf(input: Trace | readonly Trace[]): { program?: string } {
  const traces: readonly Trace[] = Array.isArray(input) ? input : [input as Trace];
  const program = traces[0]?.program ?? null;
  return program !== null && traces.every((t) => t.program === program) ? { program } : {};
}

/**
 * Trains a size-class plan from a trace, following S0: round each size up to the interval; per class a
 * linked list of cache blocks that remember the lifetimes they held; each tensor goes to a block of its
 * own class with no lifetime conflict, else the first such block of a larger class, else a new block of
 * its own class. Then, with `refine`, lowers the arena by moving tensors between classes.
 */
export function train(input: Trace | readonly Trace[], options?: TrainOptions): Plan {
  const trace = trainingTrace(input);
  const o = checkOptions<TrainOptions>(options, 'options', TRAIN_OPTIONS);
  if (Array.isArray(input) && o.iteration !== undefined && o.iteration !== 'all') {
    throw invalidArgument('range', 'options.iteration applies to one trace: with several, train on each whole');
  }
  const order = o.order === undefined ? 'alloc-time' : checkOneOf(o.order, 'options.order', TRAIN_ORDERS);
  const iteration =
    o.iteration === undefined || o.iteration === 'all'
      ? 'all'
      : checkInteger(o.iteration, 'options.iteration', 1, trace.iterations);
  const set = trainingSet(trace, iteration);
  let intervals: number[];
  if (o.interval === undefined || o.interval === 'auto') {
    intervals = o.candidates === undefined ? autoIntervals(set) : checkCandidates(o.candidates);
  } else {
    intervals = [checkInteger(o.interval, 'options.interval', 1, 2 ** 40)];
  }
  const refine = o.refine === undefined ? order === 'auto' : checkBoolean(o.refine, 'options.refine');
  const share = o.share === undefined || o.share === 'auto' ? 'auto' : checkBoolean(o.share, 'options.share');
  const serve = o.serve === undefined ? 'auto' : checkOneOf(o.serve, 'options.serve', [...PLAN_SERVES, 'auto'] as const);
  if (set.bufferCount === 0) {
    throw new TensorPoolError('ERR_TP_BAD_TRACE', `${trace.name}: nothing to train on: the trace has no allocations`);
  }

  const orders: TrainOrder[] = order === 'auto' ? ['alloc-time', 'size-desc'] : [order];
  const started = performance.now();
  let best: TrainRun | undefined;
  const candidates: TrainCandidate[] = [];
  for (const o of orders) {
    for (const run of trainEachInterval(set, intervals, o, refine)) {
      candidates.push(run.candidate);
      if (!best || run.candidate.arenaBytes < best.candidate.arenaBytes) best = run;
    }
  }
  // Why no time-shared plan was kept (undefined when one was, or none was asked for).
  let notShared: string | undefined;
  // Iterations that keep bringing new mixes of sizes (a service's overlapping requests): a layout has no
  // room for the mixes it never saw, where its blocks are found busy and the pool grows. Several traces
  // given together are the patterns to serve, each one whole.
  const changing = !Array.isArray(input) && keepsChanging(set);
  if (share === 'auto' && changing) {
    notShared = 'the iterations keep asking for new mixes of sizes, and a layout serves only the ones recorded';
  } else if (share !== false) {
    // Each tensor gets a block of its own class, so the layout hardly depends on the interval: the smallest
    // candidate wastes least to rounding. Where greedy by size ends above the bound, the search gets time.
    const interval = Math.min(...intervals);
    const limit = share === true ? best!.candidate.arenaBytes : best!.candidate.arenaBytes * SHARE_GAIN;
    const period = repeatingPeriod(set);
    let shared: TrainRun | undefined = trainTimeSharedEach(set, [interval], SHARE_SEARCH_MS)[0];
    if (shared) candidates.push(shared.candidate);
    else notShared = `no layout within ${SHARE_LAYOUT_MS / 1000} s`;
    if (shared && shared.candidate.arenaBytes <= limit && !servesSteadyState(shared.spec, set, period)) {
      // Laid out for the iterations as recorded, a tensor live across the last boundary was put under one
      // the next repetition allocates before freeing it: lay out again for the repetition.
      shared = trainTimeSharedRepeating(set, interval, period);
      if (shared) candidates.push(shared.candidate);
      if (shared && !servesSteadyState(shared.spec, set, period)) shared = undefined;
      if (!shared) notShared = 'its layout does not serve the last iteration repeated, and no layout for the repetition does';
    }
    if (shared && shared.candidate.arenaBytes > limit) notShared = share === true ? 'larger than the size classes' : `not ${Math.round((1 - SHARE_GAIN) * 100)}% smaller than the size classes`;
    if (shared && shared.candidate.arenaBytes <= limit) best = shared;
  }
  const spans = serve === 'classes' ? undefined : spansInstead(set, best!, serve === 'spans');
  const trainMs = performance.now() - started;
  const timeShared = isTimeShared(best!.candidate);
  return new Plan(spans?.spec ?? best!.spec, {
    lowerBound: set.lowerBound(),
    source: {
      trace: trace.name,
      format: trace.format,
      events: set.eventCount,
      buffers: set.bufferCount,
      ...programOf(input),
    },
    training: {
      method: spans?.spec
        ? "spans: the default classes' spans, their working set on the trace kept resident (a plan of blocks would hold more)"
        : timeShared
        ? best!.candidate.order === 'time-shared-repeating'
          ? 'time-shared size-class blocks (layout over the conflict graph of the trace with its last iterations repeated)'
          : 'time-shared size-class blocks (greedy-by-size layout)'
        : best!.candidate.refined
          ? 'S0 size-class linked blocks, refined'
          : 'S0 size-class linked blocks',
      traces: Array.isArray(input) ? input.map((t) => t.name) : undefined,
      refined: best!.candidate.refined,
      literalArenaBytes: best!.candidate.literalArenaBytes,
      order: best!.candidate.order,
      iteration,
      interval: o.interval === undefined ? 'auto' : o.interval,
      tensors: set.bufferCount,
      borrows: best!.candidate.borrows,
      trainMs,
      candidates: candidates.length > 1 ? candidates : undefined,
      notTimeShared: notShared,
      iterationsKeepChanging: changing,
      ...(spans && { spans: spans.why }),
    },
  });
}

/** What training learnt of the spans, for the plan file's `training.spans`. */
export interface SpansChoice {
  /** Bytes the spans carved replaying the trace, compared with the blocks' arena. */
  carvedBytes: number;
  /**
   * Bytes they carved replaying its serving part (servingPart: start-up's passing peak left out, as the Node
   * hook's trim gives it back): the spans kind's reserve.
   */
  servingBytes: number;
  /** The arena of the best plan of blocks, for comparison. */
  classArenaBytes: number;
  /** Whether the plan is of the spans kind. */
  chosen: boolean;
}

/**
 * The plan of the spans kind, when the spans hold less on the trace than the best plan of blocks (or when
 * asked for): that plan of blocks whole (what a pool made in-process serves, as before), saying that the
 * process pool serves from spans, with the bytes the spans carved replaying the trace's serving part as
 * their reserve (what stays resident: start-up's passing peak is given back after it, as with no plan).
 * Otherwise no spec, with `why` saying what was compared.
 */
function spansInstead(set: Trace, best: TrainRun, forced: boolean): { spec?: PlanSpec; why: SpansChoice } {
  const replay = replayThroughSpans(set);
  const classArenaBytes = best.candidate.arenaBytes;
  // Not served in full (a reservation spent): no measure, no spans plan unless asked for.
  const measured = replay.osFallbacks === 0;
  const chosen = forced || (measured && replay.carvedBytes < classArenaBytes);
  const serving = chosen ? replayThroughSpans(servingPart(set)) : undefined;
  const servingBytes = serving && serving.osFallbacks === 0 ? serving.carvedBytes : 0;
  const why: SpansChoice = { carvedBytes: replay.carvedBytes, servingBytes, classArenaBytes, chosen };
  if (!chosen) return { why };
  return { spec: { ...best.spec, serve: 'spans', spans: { reserve: servingBytes } }, why };
}

/**
 * A time-shared plan laid out for the trace followed by its last iteration (its last `period` iterations,
 * a recorded cycle of input shapes) repeating: the pairs that are live together only across the
 * repetition's boundary are kept apart too (wrapAroundConflicts, planned over the conflict graph), and the
 * plan's last `period` iterations repeat in turn. Where a tensor outlives a single repeating iteration, the
 * layout covers one more copy of it and the last two repeat in turn.
 */
function trainTimeSharedRepeating(set: Trace, interval: number, period: number): TrainRun | undefined {
  const cycle = period > 1 ? period : outlivesIteration(set) ? 2 : 1;
  if (period <= 1 && cycle === 2 && 2 * set.eventCount > MAX_SYNTHETIC_EVENTS) return undefined;
  const trace = period <= 1 && cycle === 2 ? repeatIteration(set, set.iterations, 1) : set;
  const conflicts = wrapAroundConflicts(trace, cycle);
  if (!conflicts) return undefined;
  const [run] = trainTimeSharedEach(trace, [interval], SHARE_SEARCH_MS, conflicts.length > 0 ? conflicts : undefined);
  if (!run) return undefined;
  run.spec.schedule!.cycle = cycle;
  run.candidate.order = 'time-shared-repeating';
  run.candidate.ratio = run.candidate.arenaBytes / set.lowerBound();
  return run;
}

/**
 * Whether a time-shared plan serves the trace and then its last iteration repeated (its last `period`
 * iterations, when they repeat a cycle: repeatIterations; the buffers crossing into the next iteration
 * re-linked as a loop would) with every allocation where its schedule put it. Blocks of a class are not
 * interchangeable in a time-shared plan: where tensors live across an iteration boundary, a repetition
 * can find its scheduled block under one the previous repetition left live. Such a plan is not kept.
 */
function servesSteadyState(spec: PlanSpec, trace: Trace, period: number): boolean {
  const run =
    period > 1
      ? repeatIterations(trace, trace.iterations - period + 1, trace.iterations, 2)
      : repeatIteration(trace, trace.iterations, 2 * (spec.schedule?.cycle ?? 1));
  const pool = new native.NativePool(toNativePlan(spec), {
    prefault: false,
    hugePages: false,
    lock: false,
    grow: false,
    growReserve: 0,
    osMapThreshold: 2 ** 52,
  });
  try {
    new native.NativeReplayer(pool, run.ops, run.eventBuffer, run.sizes, { touch: 'none', iterationMarks: true }).run(false);
    const s = pool.stats();
    return s.osFallbacks + s.osOversize === 0 && s.scheduleMisses === 0;
  } finally {
    pool.close();
  }
}

/** One trace, or several concatenated (Trace.concat): one plan for every pattern among them. */
function trainingTrace(input: Trace | readonly Trace[]): Trace {
  const takes = 'train() takes a Trace (from readTrace(), a recording or syntheticTrainingTrace()) or a non-empty array of them';
  if (input instanceof Trace) return input;
  if (!Array.isArray(input) || input.length === 0) throw invalidArgument('type', `${takes}, got ${describe(input)}`);
  input.forEach((t, i) => {
    if (!(t instanceof Trace)) throw invalidArgument('type', `${takes}; element ${i} is ${describe(t)}`);
  });
  return input.length === 1 ? input[0] : Trace.concat(input, input.map((t) => t.name).join(' + '));
}

function checkCandidates(value: unknown): number[] {
  if (!Array.isArray(value) || value.length === 0) {
    throw invalidArgument('type', `options.candidates must be a non-empty array of intervals, got ${describe(value)}`);
  }
  return value.map((v, i) => checkInteger(v, `options.candidates[${i}]`, 1, 2 ** 40));
}

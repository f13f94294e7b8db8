/**
 * The shape a pool is built from: S0's allocation information, the classes and their block counts.
 * `Plan` (plan.ts) is the trained, self-describing form; any `{ interval, classes }` object works too.
 */
import { TensorPoolError } from '../errors.js';
import { describe } from '../validate.js';
import type { NativePlanSpec } from '../native.js';

/** One size class of a plan. */
export interface PlanClass {
  /** Bytes per block: a multiple of the interval. */
  size: number;
  /** Blocks carved up front. */
  blocks: number;
}

/**
 * Where training placed each allocation, in allocation order: the k-th allocation after
 * `pool.markIteration()` (or pool creation) asked for `sizes[k]` bytes and went to class `classes[k]`
 * (an index into the plan's classes). While the run repeats that sequence the pool serves each allocation
 * from its scheduled class, which realises training's placement exactly.
 */
export interface PlanSchedule {
  sizes: ArrayLike<number>;
  classes: ArrayLike<number>;
  /** Time-shared plans: the block (an index into the layout) each allocation went to. */
  blocks?: ArrayLike<number>;
  /**
   * Where each trained iteration's entries begin (ascending, the first 0); absent means one. The pool
   * follows the schedule of the iteration it is in, or, when the run's sizes depart from it, the latest
   * schedule whose sizes so far are the run's: one plan serves several patterns (input shapes) in any order.
   */
  iterations?: ArrayLike<number>;
  /**
   * Past the last trained iteration, the last `cycle` of them repeat in turn (absent: 1, which follows the
   * pattern that ended with what followed it in training, else the last; native/core/schedule.h). Training sets
   * p for a recorded cycle of p patterns, and 2 where a tensor outlives an iteration: the next needs
   * another block for it.
   */
  cycle?: number;
}

/**
 * Time-shared blocks (issue 13): every block of the plan at an offset of its own. Blocks whose ranges
 * (64-byte header + size rounded up to 64) intersect share memory; the pool hands one out only while no
 * block sharing its memory is live.
 */
export interface PlanLayout {
  /** Per block: its class (an index into the plan's classes). A class has as many blocks as it says. */
  classes: ArrayLike<number>;
  /** Per block: the offset of its header in the arena, a multiple of 64. */
  offsets: ArrayLike<number>;
}

/**
 * How the process pool (`tensorpool run --plan`) serves a plan: 'classes' (the default), from the plan's
 * blocks; 'spans', from the default classes' spans, as with no plan, with `spans.reserve` bytes carved and
 * carved up front and, once written, kept resident through decay and trim (train() chooses it where a replay of the
 * recording shows the spans hold less than any plan of blocks: requests that overlap at random, each busy
 * period a new mix of sizes). A pool made in-process (new Pool(plan)) serves the classes either way.
 */
export type PlanServe = 'classes' | 'spans';
export const PLAN_SERVES: readonly PlanServe[] = ['classes', 'spans'];

/** What a plan of the spans kind carries. */
export interface PlanSpans {
  /** Bytes carved at start and kept resident once written: the spans' working set when they served the recording. */
  reserve: number;
}

/** The largest span reserve (a plan's classes hold no block above 1 TiB either). */
export const MAX_SPAN_RESERVE = 2 ** 40;

/**
 * What a Pool is built from: the interval, the classes and, from training, the schedule and a time-shared
 * layout; and how the process pool serves it (`serve`, `spans`).
 */
export interface PlanSpec {
  /** Sizes are rounded up to a multiple of this to name their class (S0). */
  interval: number;
  classes: PlanClass[];
  schedule?: PlanSchedule;
  layout?: PlanLayout;
  /** Absent: 'classes'. */
  serve?: PlanServe;
  /** With serve 'spans' (only then). */
  spans?: PlanSpans;
}

const MAX_BYTES = 2 ** 47;

function bad(where: string, message: string): TensorPoolError {
  return new TensorPoolError('ERR_TP_BAD_PLAN', `${where}: ${message}`);
}

function integerIn(value: unknown, where: string, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw bad(where, `must be an integer between ${min} and ${max}, got ${describe(value)}`);
  }
  return value;
}

/** Checks a plan-shaped object and returns a normalised copy (classes sorted by size). */
export function checkPlanSpec(value: unknown, where = 'plan'): PlanSpec {
  if (value === null || typeof value !== 'object') throw bad(where, `must be an object, got ${describe(value)}`);
  const spec = value as { interval?: unknown; classes?: unknown };
  const interval = integerIn(spec.interval, `${where}.interval`, 1, MAX_BYTES);
  if (!Array.isArray(spec.classes) || spec.classes.length === 0) {
    throw bad(`${where}.classes`, `must be a non-empty array, got ${describe(spec.classes)}`);
  }
  if (spec.classes.length > 65535) throw bad(`${where}.classes`, `at most 65535 classes, got ${spec.classes.length}`);
  const seen = new Set<number>();
  const classes = spec.classes.map((c: unknown, i: number): PlanClass => {
    const at = `${where}.classes[${i}]`;
    if (c === null || typeof c !== 'object') throw bad(at, `must be an object { size, blocks }, got ${describe(c)}`);
    const { size, blocks } = c as { size?: unknown; blocks?: unknown };
    const s = integerIn(size, `${at}.size`, 1, MAX_BYTES);
    if (s % interval !== 0) throw bad(`${at}.size`, `${s} is not a multiple of the interval ${interval}`);
    if (seen.has(s)) throw bad(`${at}.size`, `the class size ${s} appears twice`);
    seen.add(s);
    return { size: s, blocks: integerIn(blocks, `${at}.blocks`, 0, MAX_BYTES) };
  });
  // Sort the classes by size; schedule entries name classes by their position as given, so renumber them.
  const order = classes.map((_, i) => i).sort((a, b) => classes[a].size - classes[b].size);
  const sorted = order.map((i) => classes[i]);
  const newIndex = new Uint32Array(order.length);
  order.forEach((old, position) => (newIndex[old] = position));
  const layoutValue = (spec as { layout?: unknown }).layout;
  const layout = layoutValue === undefined ? undefined : checkLayout(layoutValue, classes, newIndex, `${where}.layout`);
  const scheduleValue = (spec as { schedule?: unknown }).schedule;
  const schedule =
    scheduleValue === undefined ? undefined : checkSchedule(scheduleValue, classes, newIndex, layout, `${where}.schedule`);
  const served = checkServe(spec as { serve?: unknown; spans?: unknown }, where);
  return { interval, classes: sorted, ...(schedule && { schedule }), ...(layout && { layout }), ...served };
}

/** The plan's `serve` and `spans`: absent, 'classes' without spans, or 'spans' with { reserve }. */
function checkServe(spec: { serve?: unknown; spans?: unknown }, where: string): { serve?: PlanServe; spans?: PlanSpans } {
  const { serve, spans } = spec;
  if (serve === undefined || serve === 'classes') {
    if (spans !== undefined) throw bad(`${where}.spans`, `only a plan that says serve: 'spans' has it (serve is ${describe(serve)})`);
    return serve === undefined ? {} : { serve };
  }
  if (serve !== 'spans') throw bad(`${where}.serve`, `must be one of ${PLAN_SERVES.map((s) => `'${s}'`).join(', ')}, got ${describe(serve)}`);
  if (spans === null || typeof spans !== 'object' || Array.isArray(spans)) {
    throw bad(`${where}.spans`, `must be an object { reserve } in a plan that says serve: 'spans', got ${describe(spans)}`);
  }
  const reserve = integerIn((spans as { reserve?: unknown }).reserve, `${where}.spans.reserve`, 0, MAX_SPAN_RESERVE);
  return { serve, spans: { reserve } };
}

function isArrayLike(value: unknown): value is ArrayLike<number> {
  return Array.isArray(value) || (ArrayBuffer.isView(value) && !(value instanceof DataView));
}

/** Pre: classes as given (not yet sorted); newIndex maps their positions to sorted ones. */
function checkLayout(value: unknown, classes: PlanClass[], newIndex: Uint32Array, where: string): PlanLayout {
  if (value === null || typeof value !== 'object') throw bad(where, `must be an object { classes, offsets }, got ${describe(value)}`);
  const { classes: indices, offsets } = value as { classes?: unknown; offsets?: unknown };
  if (!isArrayLike(indices) || !isArrayLike(offsets) || indices.length !== offsets.length) {
    throw bad(where, 'must hold two arrays of the same length, classes and offsets');
  }
  const placed = new Float64Array(classes.length);
  const outClasses = new Uint32Array(indices.length);
  const outOffsets = new Float64Array(indices.length);
  for (let b = 0; b < indices.length; b++) {
    const cls = indices[b];
    const offset = offsets[b];
    if (!Number.isInteger(cls) || cls < 0 || cls >= classes.length) {
      throw bad(`${where}.classes[${b}]`, `must be a class index below ${classes.length}, got ${describe(cls)}`);
    }
    if (!Number.isInteger(offset) || offset < 0 || offset > MAX_BYTES || offset % 64 !== 0) {
      throw bad(`${where}.offsets[${b}]`, `must be a multiple of 64 between 0 and ${MAX_BYTES}, got ${describe(offset)}`);
    }
    placed[cls]++;
    outClasses[b] = newIndex[cls];
    outOffsets[b] = offset;
  }
  classes.forEach((c, i) => {
    if (placed[i] !== c.blocks) {
      throw bad(where, `places ${placed[i]} blocks of class ${i} (${c.size} bytes), which has ${c.blocks}`);
    }
  });
  return { classes: outClasses, offsets: outOffsets };
}

function checkSchedule(
  value: unknown,
  classes: PlanClass[],
  newIndex: Uint32Array,
  layout: PlanLayout | undefined,
  where: string,
): PlanSchedule {
  if (value === null || typeof value !== 'object') throw bad(where, `must be an object { sizes, classes }, got ${describe(value)}`);
  const { sizes, classes: indices, blocks, iterations, cycle } = value as {
    sizes?: unknown;
    classes?: unknown;
    blocks?: unknown;
    iterations?: unknown;
    cycle?: unknown;
  };
  if (!isArrayLike(sizes) || !isArrayLike(indices) || sizes.length !== indices.length) {
    throw bad(where, 'must hold two arrays of the same length, sizes and classes');
  }
  const outSizes = new Float64Array(sizes.length);
  const outClasses = new Uint32Array(sizes.length);
  for (let k = 0; k < sizes.length; k++) {
    const size = sizes[k];
    const cls = indices[k];
    if (!Number.isInteger(size) || size < 1 || size > MAX_BYTES) {
      throw bad(`${where}.sizes[${k}]`, `must be a positive integer, got ${describe(size)}`);
    }
    if (!Number.isInteger(cls) || cls < 0 || cls >= classes.length) {
      throw bad(`${where}.classes[${k}]`, `must be a class index below ${classes.length}, got ${describe(cls)}`);
    }
    if (classes[cls].size < size) {
      throw bad(`${where}.classes[${k}]`, `class ${cls} (${classes[cls].size} bytes) cannot hold ${size} bytes`);
    }
    outSizes[k] = size;
    outClasses[k] = newIndex[cls];
  }
  const out: PlanSchedule = { sizes: outSizes, classes: outClasses };
  if (blocks !== undefined) {
    if (!layout) throw bad(`${where}.blocks`, 'names blocks, but the plan has no layout');
    if (!isArrayLike(blocks) || blocks.length !== sizes.length) throw bad(`${where}.blocks`, 'must be an array as long as sizes');
    out.blocks = Uint32Array.from(blocks, (block, k) => {
      if (!Number.isInteger(block) || block < 0 || block >= layout.classes.length || layout.classes[block] !== outClasses[k]) {
        throw bad(`${where}.blocks[${k}]`, `must be a block of class ${indices[k]} in the layout, got ${describe(block)}`);
      }
      return block;
    });
  }
  if (iterations !== undefined) {
    if (!isArrayLike(iterations) || iterations.length === 0) throw bad(`${where}.iterations`, 'must be a non-empty array');
    out.iterations = Float64Array.from(iterations, (start, i) => {
      const previous = i === 0 ? 0 : iterations[i - 1];
      if (!Number.isInteger(start) || start < previous || start > sizes.length || (i === 0 && start !== 0)) {
        throw bad(`${where}.iterations[${i}]`, `must ascend from 0 to at most ${sizes.length}, got ${describe(start)}`);
      }
      return start;
    });
  }
  if (cycle !== undefined) {
    const trained = out.iterations?.length ?? 1;
    if (!Number.isInteger(cycle) || (cycle as number) < 1 || (cycle as number) > trained) {
      throw bad(`${where}.cycle`, `must be an integer from 1 to the ${trained} iteration(s) of the schedule, got ${describe(cycle)}`);
    }
    out.cycle = cycle as number;
  }
  return out;
}

const strideOf = (size: number) => 64 + Math.ceil(size / 64) * 64;

/**
 * Bytes of arena a plan's blocks take: each block is a 64-byte header plus its size rounded up to 64; with
 * a layout, the highest block end.
 */
export function arenaBytesOf(spec: PlanSpec): number {
  if (spec.layout) {
    let height = 0;
    for (let b = 0; b < spec.layout.classes.length; b++) {
      height = Math.max(height, spec.layout.offsets[b] + strideOf(spec.classes[spec.layout.classes[b]].size));
    }
    return height;
  }
  let total = 0;
  for (const c of spec.classes) total += strideOf(c.size) * c.blocks;
  return total;
}

/** Bytes the plan's blocks hold, headers aside: Σ size × blocks. */
export function classBytesOf(spec: PlanSpec): number {
  let total = 0;
  for (const c of spec.classes) total += c.size * c.blocks;
  return total;
}

export function toNativePlan(spec: PlanSpec): NativePlanSpec {
  return {
    interval: spec.interval,
    sizes: Float64Array.from(spec.classes, (c) => c.size),
    blocks: Float64Array.from(spec.classes, (c) => c.blocks),
    ...(spec.schedule && {
      scheduleSizes: Float64Array.from(spec.schedule.sizes),
      scheduleClasses: Float64Array.from(spec.schedule.classes),
    }),
    ...(spec.schedule?.blocks && { scheduleBlocks: Float64Array.from(spec.schedule.blocks) }),
    ...(spec.schedule?.iterations && { iterationStarts: Float64Array.from(spec.schedule.iterations) }),
    ...(spec.schedule?.cycle !== undefined && { cycle: spec.schedule.cycle }),
    ...(spec.layout && {
      layoutClasses: Float64Array.from(spec.layout.classes),
      layoutOffsets: Float64Array.from(spec.layout.offsets),
    }),
  };
}

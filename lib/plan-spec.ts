/**
 * The shape a pool is built from: S0's allocation information, the classes and their block counts.
 * `Plan` (plan.ts) is the trained, self-describing form; any `{ interval, classes }` object works too.
 */
import { TensorPoolError } from './errors.js';
import { describe } from './validate.js';
import type { NativePlanSpec } from './native.js';

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
}

export interface PlanSpec {
  /** Sizes are rounded up to a multiple of this to name their class (S0). */
  interval: number;
  classes: PlanClass[];
  schedule?: PlanSchedule;
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
  const schedule = (spec as { schedule?: unknown }).schedule;
  if (schedule === undefined) return { interval, classes: sorted };
  const newIndex = new Uint32Array(order.length);
  order.forEach((old, position) => (newIndex[old] = position));
  return { interval, classes: sorted, schedule: checkSchedule(schedule, classes, newIndex, `${where}.schedule`) };
}

function isArrayLike(value: unknown): value is ArrayLike<number> {
  return Array.isArray(value) || (ArrayBuffer.isView(value) && !(value instanceof DataView));
}

function checkSchedule(value: unknown, classes: PlanClass[], newIndex: Uint32Array, where: string): PlanSchedule {
  if (value === null || typeof value !== 'object') throw bad(where, `must be an object { sizes, classes }, got ${describe(value)}`);
  const { sizes, classes: indices } = value as { sizes?: unknown; classes?: unknown };
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
  return { sizes: outSizes, classes: outClasses };
}

/** Bytes of arena a plan's blocks take: each block is a 64-byte header plus its size rounded up to 64. */
export function arenaBytesOf(spec: PlanSpec): number {
  let total = 0;
  for (const c of spec.classes) total += (64 + Math.ceil(c.size / 64) * 64) * c.blocks;
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
  };
}

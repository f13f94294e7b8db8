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

export interface PlanSpec {
  /** Sizes are rounded up to a multiple of this to name their class (S0). */
  interval: number;
  classes: PlanClass[];
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
  classes.sort((a, b) => a.size - b.size);
  return { interval, classes };
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
  };
}

/**
 * Offset plans: a static layout of one iteration (or a whole trace) for the offsets-mode pool. The k-th
 * allocation after pool.markIteration() is served at offsets[k] when it asks for sizes[k] bytes.
 *
 * ```json
 * { "format": "tensorpool-offset-plan", "version": 1, "height": 215409408,
 *   "sizes": [4, 288, ...], "offsets": [0, 64, ...], "lowerBound": 215409384,
 *   "strategy": "best", "optimal": true, "source": { "trace": "...", "iteration": "all", "buffers": 1442 } }
 * ```
 */

import { TensorPoolError } from '../errors.js';
import { readJsonFile, writeFileAtomic } from '../io/files.js';
import { jsonPieces } from '../io/json-pieces.js';
import { planOffsets, verifyOffsets, type Strategy, STRATEGIES } from './planner.js';
import { problemFromTrace } from '../trace/problem.js';
import type { Trace } from '../trace/trace.js';
import { checkInteger, checkOneOf, checkOptions, describe } from '../validate.js';

/** The `format` field of an offset plan file. */
export const OFFSET_PLAN_FORMAT = 'tensorpool-offset-plan';
/** The version of the offset plan files this package writes. */
export const OFFSET_PLAN_VERSION = 1;

/** Where an offset plan came from: the trace, the iteration planned, and its buffer count. */
export interface OffsetPlanSource {
  trace?: string;
  iteration?: number | 'all';
  buffers?: number;
  [key: string]: unknown;
}

/** Options of OffsetPlan.fromTrace(). */
export interface OffsetPlanOptions {
  /** Plan one iteration (1-based), replayed every iteration, or the whole trace. Default 'all'. */
  iteration?: number | 'all';
  strategy?: Strategy;
  timeLimitMs?: number;
}

const ALIGN = 64;

/**
 * A static layout for offsets mode (PoolOptions.offsets): every allocation of a trace (or of one iteration,
 * replayed every iteration) at a planned offset in one arena.
 */
export class OffsetPlan {
  /** An offset plan of these parts, as they are (fromTrace() and fromJSON() make checked ones). */
  constructor(
    /** Bytes of arena the layout needs. */
    readonly height: number,
    /** Per allocation, in order: the bytes it asks for, and its offset (a multiple of 64). */
    readonly sizes: Float64Array,
    readonly offsets: Float64Array,
    /** The most bytes live at once in what was planned. */
    readonly lowerBound: number,
    readonly strategy: string,
    readonly optimal: boolean,
    readonly source: OffsetPlanSource,
  ) {}

  /**
   * Plans the buffers of a trace (or one of its iterations) with a static planner. Sizes are rounded up
   * to 64 bytes for planning, so every offset keeps the pool's 64-byte alignment.
   */
  static fromTrace(trace: Trace, options?: OffsetPlanOptions): OffsetPlan {
    const o = checkOptions<OffsetPlanOptions>(options, 'options', ['iteration', 'strategy', 'timeLimitMs']);
    const iteration = o.iteration === undefined || o.iteration === 'all' ? 'all' : checkInteger(o.iteration, 'options.iteration', 1, trace.iterations);
    const strategy = o.strategy === undefined ? 'best' : checkOneOf(o.strategy, 'options.strategy', STRATEGIES);
    const set = iteration === 'all' ? trace : trace.iteration(iteration);
    if (set.bufferCount === 0) throw new TensorPoolError('ERR_TP_BAD_TRACE', `${trace.name}: nothing to plan: no allocations`);
    const layout = planOffsets(alignedProblem(set), { strategy, timeLimitMs: o.timeLimitMs ?? 10000 });
    return new OffsetPlan(layout.peak, Float64Array.from(set.sizes), layout.offsets, set.lowerBound(), strategy, layout.optimal, {
      trace: trace.name,
      iteration,
      buffers: set.bufferCount,
    });
  }

  /** The offset plan file's content (what write() writes). */
  toJSON() {
    return {
      format: OFFSET_PLAN_FORMAT,
      version: OFFSET_PLAN_VERSION,
      height: this.height,
      lowerBound: this.lowerBound,
      strategy: this.strategy,
      optimal: this.optimal,
      source: this.source,
      sizes: Array.from(this.sizes),
      offsets: Array.from(this.offsets),
    };
  }

  /** An offset plan from a parsed file's content; `where` names it in errors (ERR_TP_BAD_PLAN). */
  static fromJSON(json: unknown, where = 'offset plan'): OffsetPlan {
    const bad = (message: string) => new TensorPoolError('ERR_TP_BAD_PLAN', `${where}: ${message}`);
    const o = json as Record<string, unknown>;
    if (o === null || typeof o !== 'object' || o.format !== OFFSET_PLAN_FORMAT) {
      throw bad(`not a tensorpool offset plan (field "format" is ${describe(o?.format)}, expected "${OFFSET_PLAN_FORMAT}")`);
    }
    if (o.version !== OFFSET_PLAN_VERSION) {
      throw bad(`offset plan format version ${JSON.stringify(o.version) ?? 'missing'} is not supported: this tensorpool reads version ${OFFSET_PLAN_VERSION}`);
    }
    const height = o.height;
    if (typeof height !== 'number' || !Number.isSafeInteger(height) || height < 1) throw bad(`field "height" must be a positive integer, got ${describe(height)}`);
    if (!Array.isArray(o.sizes) || !Array.isArray(o.offsets) || o.sizes.length !== o.offsets.length) {
      throw bad('fields "sizes" and "offsets" must be arrays of the same length');
    }
    for (let k = 0; k < o.sizes.length; k++) {
      const size = o.sizes[k];
      const offset = o.offsets[k];
      if (!Number.isSafeInteger(size) || size < 1) throw bad(`sizes[${k}] must be a positive integer, got ${describe(size)}`);
      if (!Number.isSafeInteger(offset) || offset < 0 || offset % ALIGN !== 0 || offset + size > height) {
        throw bad(`offsets[${k}] must be a multiple of ${ALIGN} with the block inside the height, got ${describe(offset)}`);
      }
    }
    return new OffsetPlan(
      height,
      Float64Array.from(o.sizes as number[]),
      Float64Array.from(o.offsets as number[]),
      typeof o.lowerBound === 'number' ? o.lowerBound : 0,
      typeof o.strategy === 'string' ? o.strategy : 'unknown',
      o.optimal === true,
      (o.source as OffsetPlanSource | undefined) ?? {},
    );
  }

  /**
   * Fails unless these offsets keep apart every two of `set`'s buffers that live at the same time (checked
   * natively, as the planners' layouts are): the sizes must be `set`'s, in order. A plan from a file claims
   * what it likes; replayed unchecked, overlapping blocks would make a false floor.
   */
  verify(set: Trace): void {
    const { valid, why } = verifyOffsets(alignedProblem(set), this.offsets);
    if (!valid) {
      throw new TensorPoolError('ERR_TP_BAD_PLAN', `the offset plan does not fit ${set.name}: ${why} (blocks that live at the same time must not overlap)`);
    }
  }

  /** Reads an offset plan file (at most MAX_JSON_BYTES: a larger file is refused, not read). */
  static read(path: string): OffsetPlan {
    return OffsetPlan.fromJSON(readJsonFile(path, 'offset plan', 'ERR_TP_BAD_PLAN'), path);
  }

  /** Writes the offset plan as JSON, piece by piece (a plan of many buffers is longer than any string). */
  write(path: string): void {
    writeFileAtomic(path, jsonPieces(this.toJSON()));
  }
}

/** The planning problem of `set`'s buffers, each rounded up to 64 bytes: every offset keeps the pool's alignment. */
function alignedProblem(set: Trace) {
  const problem = problemFromTrace(set);
  return { ...problem, size: problem.size.map((s) => Math.ceil(s / ALIGN) * ALIGN) };
}

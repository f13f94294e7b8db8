/**
 * Plan JSON: S0's allocation information in a versioned, self-describing file.
 *
 * ```json
 * { "format": "tensorpool-plan", "version": 1, "interval": 4096,
 *   "classes": [{ "size": 4096, "blocks": 3 }, ...],
 *   "totals": { "blocks": 40, "classBytes": 123, "arenaBytes": 456 },
 *   "lowerBound": 215441388,
 *   "source": { "trace": "resnet18_train/trace.csv.gz", "format": "tensorpool-csv", "events": 2820, ... },
 *   "training": { "order": "alloc-time", "iteration": "all", "tensors": 1442, "borrows": 3, ... } }
 * ```
 * Version 2 adds what time-shared plans need (issue 13): `layout` ({ classes, offsets }: every block's class
 * and offset; blocks whose ranges intersect share memory, and that is the record of which do) and, in the
 * schedule, `blocks` (per allocation its block), `iterations` (where each trained iteration's entries
 * begin) and `cycle` (how many of the last iterations repeat in turn past the last, default 1). Version 3
 * adds `serve` ("classes" or "spans": how `tensorpool run --plan` serves it, PlanServe) and, for "spans",
 * `spans` ({ reserve }: the bytes carved up front and kept); it is written only for a plan of the spans kind, so
 * that a plan of blocks stays readable by a tensorpool that reads version 2. A reader accepts versions 1 to
 * 3 and rejects any other with a message that says which it reads.
 */

import { TensorPoolError } from '../errors.js';
import { readJsonFile, writeFileAtomic } from '../io/files.js';
import { jsonPieces } from '../io/json-pieces.js';
import { arenaBytesOf, checkPlanSpec, classBytesOf, type PlanClass, type PlanLayout, type PlanSchedule, type PlanServe, type PlanSpans, type PlanSpec } from './plan-spec.js';
import { describe } from '../validate.js';

/** The `format` field of a plan file. */
export const PLAN_FORMAT = 'tensorpool-plan';
/** The version of the plan files this package writes: 2, or 3 for a plan of the spans kind (serve: 'spans'). */
export const PLAN_VERSION = 2;
/** The version a plan of the spans kind is written with. */
export const SPANS_PLAN_VERSION = 3;
/** Versions this reader accepts. */
export const PLAN_VERSIONS: readonly number[] = [1, 2, 3];

/** Where a plan came from. Free-form beyond these fields. */
export interface PlanSource {
  trace?: string;
  format?: string;
  events?: number;
  buffers?: number;
  [key: string]: unknown;
}

/** How it was trained. Free-form beyond these fields. */
export interface PlanTraining {
  order?: string;
  iteration?: number | 'all';
  tensors?: number;
  borrows?: number;
  trainMs?: number;
  [key: string]: unknown;
}

/** A plan file's content (Plan.toJSON(), Plan.read()). */
export interface PlanJson {
  format: typeof PLAN_FORMAT;
  version: number;
  interval: number;
  classes: PlanClass[];
  schedule?: { sizes: number[]; classes: number[]; blocks?: number[]; iterations?: number[]; cycle?: number };
  layout?: { classes: number[]; offsets: number[] };
  serve?: PlanServe;
  spans?: PlanSpans;
  totals: { blocks: number; classBytes: number; arenaBytes: number; sharingPairs?: number };
  lowerBound: number | null;
  source: PlanSource;
  training: PlanTraining;
}

/**
 * A trained plan (train()): the size classes and block counts a Pool is built from, where training placed
 * each allocation, and where the plan came from. Read and written as JSON files.
 */
export class Plan implements PlanSpec {
  readonly interval: number;
  readonly classes: PlanClass[];
  /** Where training placed each allocation (see PlanSchedule), or undefined. */
  readonly schedule: PlanSchedule | undefined;
  /** Time-shared plans: every block's class and offset (see PlanLayout), or undefined. */
  readonly layout: PlanLayout | undefined;
  /** How `tensorpool run --plan` serves it: 'classes' (its blocks) or 'spans' (see PlanServe). */
  readonly serve: PlanServe;
  /** Plans of the spans kind: what they carry (see PlanSpans), else undefined. */
  readonly spans: PlanSpans | undefined;
  /** Max bytes live at once in the trace it was trained on (null when unknown). */
  readonly lowerBound: number | null;
  readonly source: PlanSource;
  readonly training: PlanTraining;

  /** A plan from a spec (checked: ERR_TP_BAD_PLAN when inconsistent) and what is known of its origin. */
  constructor(
    spec: PlanSpec,
    meta: { lowerBound?: number | null; source?: PlanSource; training?: PlanTraining } = {},
  ) {
    const checked = checkPlanSpec(spec);
    this.interval = checked.interval;
    this.classes = checked.classes;
    this.schedule = checked.schedule;
    this.layout = checked.layout;
    this.serve = checked.serve ?? 'classes';
    this.spans = checked.spans;
    this.lowerBound = meta.lowerBound ?? null;
    this.source = meta.source ?? {};
    this.training = meta.training ?? {};
  }

  /** Blocks over all classes. */
  get blocks(): number {
    return this.classes.reduce((n, c) => n + c.blocks, 0);
  }
  /** Σ size × blocks. */
  get classBytes(): number {
    return classBytesOf(this);
  }
  /** Bytes of arena the pool maps for this plan, 64-byte block headers included. */
  get arenaBytes(): number {
    return arenaBytesOf(this);
  }
  /** Time-shared plans: how many pairs of blocks share memory (0 without a layout). */
  get sharingPairs(): number {
    const layout = this.layout;
    if (!layout) return 0;
    const ends = (b: number) => layout.offsets[b] + 64 + Math.ceil(this.classes[layout.classes[b]].size / 64) * 64;
    const byOffset = Array.from({ length: layout.offsets.length }, (_, b) => b).sort((a, b) => layout.offsets[a] - layout.offsets[b]);
    let pairs = 0;
    for (let i = 0; i < byOffset.length; i++) {
      const end = ends(byOffset[i]);
      for (let j = i + 1; j < byOffset.length && layout.offsets[byOffset[j]] < end; j++) pairs++;
    }
    return pairs;
  }
  /** arenaBytes / lowerBound, or null when the lower bound is unknown. */
  get ratio(): number | null {
    return this.lowerBound ? this.arenaBytes / this.lowerBound : null;
  }

  /** The plan file's content (what write() writes). */
  toJSON(): PlanJson {
    return {
      format: PLAN_FORMAT,
      version: this.serve === 'spans' ? SPANS_PLAN_VERSION : PLAN_VERSION,
      interval: this.interval,
      classes: this.classes.map((c) => ({ size: c.size, blocks: c.blocks })),
      schedule: this.schedule && {
        sizes: Array.from(this.schedule.sizes),
        classes: Array.from(this.schedule.classes),
        ...(this.schedule.blocks && { blocks: Array.from(this.schedule.blocks) }),
        ...(this.schedule.iterations && { iterations: Array.from(this.schedule.iterations) }),
        ...(this.schedule.cycle !== undefined && { cycle: this.schedule.cycle }),
      },
      ...(this.layout && { layout: { classes: Array.from(this.layout.classes), offsets: Array.from(this.layout.offsets) } }),
      ...(this.serve === 'spans' && { serve: this.serve, spans: { reserve: this.spans!.reserve } }),
      totals: {
        blocks: this.blocks,
        classBytes: this.classBytes,
        arenaBytes: this.arenaBytes,
        ...(this.layout && { sharingPairs: this.sharingPairs }),
      },
      lowerBound: this.lowerBound,
      source: this.source,
      training: this.training,
    };
  }

  /** Validates a parsed plan file. `where` names it in errors (a path, usually). */
  static fromJSON(json: unknown, where = 'plan'): Plan {
    const bad = (message: string) => new TensorPoolError('ERR_TP_BAD_PLAN', `${where}: ${message}`);
    if (json === null || typeof json !== 'object' || Array.isArray(json)) {
      throw bad(`a plan is a JSON object, got ${describe(json)}`);
    }
    const o = json as Record<string, unknown>;
    if (o.format !== PLAN_FORMAT) {
      throw bad(`not a tensorpool plan (field "format" is ${describe(o.format)}, expected "${PLAN_FORMAT}")`);
    }
    if (!PLAN_VERSIONS.includes(o.version as number)) {
      const newer = typeof o.version === 'number' && o.version > PLAN_VERSION;
      throw bad(
        `plan format version ${JSON.stringify(o.version) ?? 'missing'} is not supported: this tensorpool reads versions ${PLAN_VERSIONS.join(', ')}` +
          (newer ? ' (the file was written by a newer tensorpool; upgrade to read it)' : ''),
      );
    }
    const lowerBound = o.lowerBound;
    if (lowerBound !== null && lowerBound !== undefined && !(typeof lowerBound === 'number' && lowerBound >= 0)) {
      throw bad(`field "lowerBound" must be a non-negative number or null, got ${describe(lowerBound)}`);
    }
    for (const key of ['source', 'training'] as const) {
      if (o[key] !== undefined && (o[key] === null || typeof o[key] !== 'object' || Array.isArray(o[key]))) {
        throw bad(`field "${key}" must be an object, got ${describe(o[key])}`);
      }
    }
    if (o.version === 1 && (o.layout !== undefined || (o.schedule as { blocks?: unknown } | undefined)?.blocks !== undefined)) {
      throw bad('a version 1 plan has no layout or schedule blocks (they came with version 2)');
    }
    if ((o.version as number) < SPANS_PLAN_VERSION && (o.serve !== undefined || o.spans !== undefined)) {
      throw bad(`a version ${o.version as number} plan has no serve or spans field (they came with version ${SPANS_PLAN_VERSION})`);
    }
    let spec: PlanSpec;
    try {
      spec = checkPlanSpec(o, 'plan');
    } catch (error) {
      throw bad((error as Error).message);
    }
    return new Plan(spec, {
      lowerBound: (lowerBound as number | null | undefined) ?? null,
      source: (o.source as PlanSource | undefined) ?? {},
      training: (o.training as PlanTraining | undefined) ?? {},
    });
  }

  /** Reads a plan file written by write() (at most MAX_JSON_BYTES: a larger file is refused, not read). */
  static read(path: string): Plan {
    return Plan.fromJSON(readJsonFile(path, 'plan', 'ERR_TP_BAD_PLAN'), path);
  }

  /**
   * Writes the plan as JSON (to a temporary file first, so a failed write leaves no partial plan), piece by
   * piece: a plan of tens of millions of schedule entries is longer than any string.
   */
  write(path: string): void {
    writeFileAtomic(path, jsonPieces(this.toJSON(), '  '));
  }
}

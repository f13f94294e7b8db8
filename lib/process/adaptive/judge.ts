/**
 * Adaptive mode's judge: at each mark of the planned mode, whether the workload needs a new plan or a
 * smaller one, and, once one is trained, whether it is worth switching to. An iteration drifts when its
 * off-plan allocations (OS fallbacks, oversize requests, borrows the schedule did not call for, blocks a
 * growing pool carved) exceed `replanThreshold` of them. A new plan is needed for a pattern the serving plan
 * was not trained on (a new shape) that drifted, once the window holds it `stableIterations` times, and for
 * a known pattern that drifted on its `replanAfter` latest occurrences (other shapes of a cycle may come
 * between); a smaller one, every `recordLimit` iterations, when a pattern the plan was kept for has left the
 * window, if its arena is at least 10% smaller (the shapes that left give their memory back).
 * Hysteresis, so that a run cannot make the pool flap: nothing is judged during the `cooldownIterations`
 * after a switch; the cooldown doubles, up to MAX_COOLDOWN, after a given-up attempt (a re-trained plan
 * identical to the serving one included) and after re-plans that follow each other closely, and a plan that
 * holds resets it. Everything is counted in marks (no clock): the same iterations get the same verdicts.
 */
import type { NativeIterationSummary } from '../../native.js';
import type { Plan } from '../../plan/plan.js';
import type { Settings } from './options.js';
import type { PlanSwitch } from './switcher.js';
import { type IterationWindow, type Pattern, nearPattern } from './window.js';

/** One iteration as the drift check saw it. */
export interface IterationReport {
  /** Iterations completed so far (this one included). */
  iteration: number;
  allocs: number;
  /** Served by the OS: no class had a free block, or the request was larger than every class. */
  osFallbacks: number;
  /** Served by a larger class than the schedule named (or than its own, without a schedule). */
  unplannedBorrows: number;
  /** Served by a block the pool carved for it (a pool that grows: the plan had no free block that fits). */
  grown: number;
  /** Whether its pattern is none of those the serving plan was trained on (a new input shape). */
  newPattern: boolean;
}

/** What a plan is trained for: why, on which patterns, and (a re-plan) what triggered it. */
export interface Purpose {
  reason: PlanSwitch['reason'];
  trigger: IterationReport | null;
  /** The window's patterns, and those it held at least twice. */
  patterns: Pattern[];
  repeated: Pattern[];
  /** The most blocks live at the start of one of the window's iterations. */
  carried: number;
}

/** A plan trained for `reason` on the window as it is now. */
export function purposeOf(reason: Purpose['reason'], trigger: IterationReport | null, window: IterationWindow): Purpose {
  return { reason, trigger, patterns: window.patterns(), repeated: window.patterns(2), carried: window.maxCarried() };
}

/** A shrink switches only to a plan whose arena is at most this fraction of the serving one's. */
const SHRINK_GAIN = 0.9;
/** The cooldown never doubles beyond this many iterations. */
const MAX_COOLDOWN = 1024;

export class Judge {
  readonly #settings: Settings;
  #trained: Pattern[] | null; // the patterns the serving plan was trained on (null: a plan given, not trained here)
  #kept: Pattern[] = []; // of them, those a shrink keeps the plan for
  #trainedCarried = Infinity; // the most blocks carried into an iteration the serving plan was trained on
  #sinceChange = 0; // iterations judged since the last switch or given-up re-plan
  #lastSwitchAt: number | null = null; // the iteration of the last switch
  #cooldown: number;
  #driftStreak = 0;
  // Known patterns that drifted, each with the occurrences in a row on which it did: in a cycle of input
  // shapes, one shape the plan serves badly drifts every time it comes, between shapes that do not.
  #drifting: { pattern: Pattern; streak: number }[] = [];
  #leftPlan: Pattern[] = []; // new patterns that left the serving plan, waiting to repeat

  /** `givenPlan`: the pool started with a plan it was not trained on here. */
  constructor(settings: Settings, givenPlan: boolean) {
    this.#settings = settings;
    this.#trained = givenPlan ? null : [];
    this.#cooldown = settings.cooldownIterations;
  }

  /** Occurrences in a row on which the pattern of the last iteration drifted (a known pattern). */
  get driftStreak(): number {
    return this.#driftStreak;
  }

  /** Patterns the serving plan was trained on. */
  get patterns(): number {
    return this.#trained?.length ?? 0;
  }

  /** No plan after a failure: counts this iteration, and says whether the cooldown is over (a new attempt is due). */
  retryDue(): boolean {
    return ++this.#sinceChange > this.#cooldown;
  }

  /**
   * Planned: judges the iteration `iteration` that ended (summed up in `s`, begun with `carried` blocks live)
   * and says what to train a plan for, or null. A new shape that left the plan is re-planned for once it has
   * repeated (a one-off iteration, such as one in which another thread or a garbage collector allocated, is
   * no shape to plan for); until then the pool serves it as it can (a growing pool grows). A known shape
   * re-plans once it drifted on its `replanAfter` latest occurrences, not counting those that began with more
   * blocks live than any iteration the plan was trained on (`carried`): buffers of earlier iterations a
   * garbage collector frees late hold the plan's blocks, which no plan of this shape can foresee; the pool
   * serves the iteration as it can, and the next ones once they are freed.
   */
  watch(s: NativeIterationSummary, iteration: number, carried: number, window: IterationWindow): Purpose | null {
    const report = this.#report(s, iteration);
    const limit = this.#settings.replanThreshold * report.allocs;
    const pattern = { allocs: s.allocs, bytes: s.bytes };
    const offPlan = report.osFallbacks + report.unplannedBorrows + report.grown > limit;
    if (report.newPattern && offPlan && !this.#leftPlan.some((p) => nearPattern(p, pattern))) this.#leftPlan.push(pattern);
    if (++this.#sinceChange <= this.#cooldown) return null;
    if (report.newPattern && this.#leftPlan.some((p) => nearPattern(p, pattern))) {
      return window.occurrences(pattern) >= this.#settings.stableIterations ? purposeOf('drift', report, window) : null;
    }
    const drifting = this.#drifting.find((d) => nearPattern(d.pattern, pattern));
    if (!report.newPattern && offPlan) {
      if (carried > this.#trainedCarried) return null;
      const d = drifting ?? { pattern, streak: 0 };
      if (!drifting) this.#drifting.push(d);
      this.#driftStreak = ++d.streak;
      return d.streak >= this.#settings.replanAfter ? purposeOf('drift', report, window) : null;
    }
    if (drifting) this.#drifting.splice(this.#drifting.indexOf(drifting), 1);
    this.#driftStreak = 0;
    if (this.#sinceChange % this.#settings.recordLimit === 0 && window.full && this.#kept.length > 0) {
      const patterns = window.patterns();
      if (this.#kept.some((t) => !patterns.some((p) => nearPattern(p, t)))) return purposeOf('shrink', null, window);
    }
    return null;
  }

  /**
   * Whether to switch from `serving` to `plan`, trained for `purpose`: 'keep' a shrink that would save less
   * than SHRINK_GAIN (the serving plan stays, kept for the window's shapes: it was trained on more, and
   * they are what the next shrink looks for); 'same' for a plan with the serving one's classes (re-planning
   * cannot help); else 'switch'.
   */
  verdict(plan: Plan, purpose: Purpose, serving: Plan | null): 'switch' | 'keep' | 'same' {
    if (purpose.reason === 'shrink' && !(plan.arenaBytes <= SHRINK_GAIN * serving!.arenaBytes)) {
      this.#sinceChange = this.#cooldown;
      this.#kept = purpose.repeated;
      return 'keep';
    }
    return serving && sameClasses(serving, plan) ? 'same' : 'switch';
  }

  /** A plan trained for `purpose` serves from the iteration after `iteration`: judging starts over for it. */
  switched(purpose: Purpose, iteration: number): void {
    // Re-plans that follow each other closely (shapes that keep changing) wait longer each time.
    const closely = purpose.reason === 'drift' && this.#lastSwitchAt !== null && iteration - this.#lastSwitchAt <= 2 * this.#cooldown + 4;
    this.#cooldown = closely ? Math.min(Math.max(1, this.#cooldown) * 2, MAX_COOLDOWN) : this.#settings.cooldownIterations;
    this.#trained = purpose.patterns;
    this.#trainedCarried = purpose.carried;
    // What a shrink keeps the plan for: the patterns the window held twice (a one-off iteration, such as
    // one in which a thread started, is no shape to keep a plan for).
    this.#kept = purpose.repeated;
    this.#lastSwitchAt = iteration;
    this.#startOver();
  }

  /** An attempt was given up: the next waits twice as long. */
  abandoned(): void {
    this.#cooldown = Math.min(Math.max(1, this.#cooldown) * 2, MAX_COOLDOWN);
    this.#startOver();
  }

  #startOver(): void {
    this.#sinceChange = 0;
    this.#driftStreak = 0;
    this.#drifting = [];
    this.#leftPlan = [];
  }

  #report(s: NativeIterationSummary, iteration: number): IterationReport {
    const pattern = { allocs: s.allocs, bytes: s.bytes };
    return {
      iteration,
      allocs: s.allocs,
      osFallbacks: s.osFallbacks + s.osOversize,
      unplannedBorrows: s.unplannedBorrows,
      grown: s.grown,
      newPattern: this.#trained !== null && !this.#trained.some((p) => nearPattern(p, pattern)),
    };
  }
}

function sameClasses(a: Plan, b: Plan): boolean {
  return (
    a.interval === b.interval &&
    a.classes.length === b.classes.length &&
    a.classes.every((c, i) => c.size === b.classes[i].size && c.blocks === b.classes[i].blocks)
  );
}

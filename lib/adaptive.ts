/**
 * Adaptive mode: the pool records its own first iterations, trains a plan once their pattern is stable,
 * switches to it without a restart, and re-plans when the run drifts away from it. The policy lives here;
 * the native pool records (native/core/recorder.h), sums each iteration up at markIteration() and switches
 * arenas (Pool::switchPlan, or Pool::prepareSwitch off the JS thread, installed by the next
 * markIteration()). One instance belongs to one Pool.
 *
 * Modes, per completed iteration (the allocations between two markIteration() calls; iterations with no
 * allocation are ignored):
 *   warm-up    the first `warmupIterations`: nothing is recorded (a first step allocates state once).
 *   recording  every event is recorded. The window is the latest run of recorded iterations in which each
 *              pattern occurs at least `stableIterations` times and at most `maxPatterns` patterns occur
 *              (one pattern repeated, or a cycle of input shapes); once there is one, a plan is trained
 *              on it (one schedule per iteration, so it serves each pattern) and the pool switches →
 *              planned (with `background`, → training first). After `recordLimit` iterations without
 *              a stable window the attempt is abandoned → planned (or unplanned), and the next attempt
 *              waits twice as long.
 *   planned    each iteration's off-plan allocations (OS fallbacks, oversize requests, borrows the plan's
 *              schedule did not call for) are counted. When they exceed `replanThreshold` of its
 *              allocations for `replanAfter` iterations in a row (not counting the `cooldownIterations`
 *              after a switch), the pool records again → recording.
 *   training   the plan is trained on a worker thread (lib/background-training.ts) while the old classes go
 *              on serving; the first markIteration() after it finished takes the plan → switching.
 *   switching  the new plan's arena is being mapped and pre-faulted on a libuv thread while the old
 *              classes go on serving; the first markIteration() after it is ready installs it → planned.
 *   unplanned  no plan yet and the last attempt was abandoned: the default classes serve; recording
 *              starts again after the cooldown.
 * Hysteresis, so a run cannot make the pool flap: drift must persist for `replanAfter` iterations; nothing
 * is judged during a cooldown; a re-trained plan identical to the serving one is not switched to; each
 * abandoned or fruitless attempt doubles the cooldown (a successful switch resets it).
 *
 * "Same pattern": the same number of allocations with the same multiset of requested sizes (each size
 * asked for as many times, in any order), compared by count, total bytes and a 53-bit order-independent
 * hash of the sizes (native/core/pool.h IterationSummary). Where no window holds its patterns exactly, one whose
 * iterations are within 2% of each other in allocations and in bytes is taken (a process under the preload
 * library meets allocations now and then that are no pattern's: another thread's, a one-off buffer).
 */
import { BackgroundTraining } from './background-training.js';
import { fromNative } from './errors.js';
import type { NativeControlledPool, NativeIterationSummary } from './native.js';
import { Plan } from './plan.js';
import { toNativePlan } from './plan-spec.js';
import { DEFAULT_RECORD_EVENTS, traceFromRecording } from './recording.js';
import type { Trace } from './trace/trace.js';
import { train, type TrainOptions } from './train.js';
import { checkBoolean, checkFunction, checkInteger, checkOptions, describe, invalidArgument } from './validate.js';

/**
 * Adaptive mode (PoolOptions.adaptive): the pool records its own iterations, trains a plan from them and
 * switches to it at a mark, again when the pattern drifts.
 */
export interface AdaptiveOptions {
  /** Iterations to let pass before recording. Default 1. */
  warmupIterations?: number;
  /** Iterations of each pattern the window must hold (at least 2, so that buffers crossing an iteration
   *  boundary are planned for). Default 2. */
  stableIterations?: number;
  /** Different patterns (input shapes) a window may hold. 1: only identical iterations. Default 8. */
  maxPatterns?: number;
  /** Off-plan allocations, as a fraction of an iteration's allocations, above which it drifts. Default 0.01. */
  replanThreshold?: number;
  /** Drifting iterations in a row that start a re-plan. Default 2. */
  replanAfter?: number;
  /** Iterations after a switch during which drift is not judged. Default 4. */
  cooldownIterations?: number;
  /** Iterations a recording may take to find a stable window before it is abandoned. Default 32: a cycle of
   *  8 input shapes seen twice after a first cycle whose one-off allocations make it differ. */
  recordLimit?: number;
  /** Recorded events held at most (16 bytes each). Default 4 Mi events (64 MiB). */
  maxRecordEvents?: number;
  /** How plans are trained (train()'s interval, order, candidates). Default: interval and order 'auto'. */
  train?: Omit<TrainOptions, 'iteration'>;
  /**
   * Train the plan on a worker thread, then build its arena (map and pre-fault it) on a libuv thread, while
   * the serving classes go on serving; switch at the first markIteration() after it is ready: no iteration
   * stalls. false: train and switch inside the markIteration() that completed the window, which then waits
   * for both (training takes up to seconds on long recordings; pre-faulting about a second per GiB).
   * Default true.
   */
  background?: boolean;
  /** Called after every switch, from the markIteration() that made it. */
  onSwitch?: (event: PlanSwitch) => void;
}

/**
 * Where adaptive mode stands: warming up, recording a window, training, switching to the plan, serving it
 * ('planned'), or given up on a plan ('unplanned').
 */
export type AdaptiveMode = 'warm-up' | 'recording' | 'training' | 'switching' | 'planned' | 'unplanned';

/** One iteration as the drift check saw it. */
export interface IterationReport {
  /** Iterations completed so far (this one included). */
  iteration: number;
  allocs: number;
  /** Served by the OS: no class had a free block, or the request was larger than every class. */
  osFallbacks: number;
  /** Served by a larger class than the schedule named (or than its own, without a schedule). */
  unplannedBorrows: number;
}

/** One switch to a newly trained plan, as AdaptiveOptions.onSwitch and ProcessPool.onSwitch receive it. */
export interface PlanSwitch {
  /** The pool's generation now serving (stats().generation). */
  generation: number;
  /** Iterations completed when the pool switched: the plan serves from the next one. */
  iteration: number;
  /** Iterations the previous classes served while the plan was trained and its arena built in the background
   *  (0 when not). */
  waitedIterations: number;
  /** Whether the arena was built in the background (options.adaptive.background). */
  background: boolean;
  /** 'warm-up': the first plan; 'drift': a re-plan. */
  reason: 'warm-up' | 'drift';
  /** The iteration whose drift started the re-plan (null for the first plan). */
  trigger: IterationReport | null;
  /** The plan now serving: write() it to start the next run planned. */
  plan: Plan;
  /** The recorded iterations it was trained on. */
  trace: Trace;
  /** Training, on the thread named by `trainedOn`. */
  trainMs: number;
  /** 'worker': a worker thread trained the plan (background); 'thread': the pool's own thread did. */
  trainedOn: 'worker' | 'thread';
  /** Time the JS thread spent switching: mapping and pre-faulting the arena, or only queueing that work in
   *  the background. */
  switchMs: number;
  /** From the end of training until the plan served (in the background: building the arena, plus the
   *  wait for the next markIteration()). */
  readyMs: number;
}

/** Adaptive mode's state (PoolStats.adaptive). */
export interface AdaptiveStats {
  mode: AdaptiveMode;
  /** Iterations completed (with at least one allocation). */
  iteration: number;
  /** Plans switched to; of them re-plans after drift. */
  switches: number;
  replans: number;
  /** Recordings given up (no stable window, a plan identical to the serving one, or a failure). */
  abandoned: number;
  /** Drifting iterations in a row, now. */
  driftStreak: number;
  /** Events held by the recorder now. */
  recordedEvents: number;
  lastSwitch: PlanSwitch | null;
  /** The last 32 switches, without their plans and traces. */
  history: Omit<PlanSwitch, 'plan' | 'trace'>[];
  /** Why the last attempt was abandoned, or null. */
  lastError: string | null;
  /** Training or switching: the work the mode waits for (the worker's training, or building the arena) is
   *  done, so the next markIteration() moves on. false in the other modes. */
  ready: boolean;
}

const ADAPTIVE_OPTIONS = [
  'warmupIterations',
  'stableIterations',
  'maxPatterns',
  'replanThreshold',
  'replanAfter',
  'cooldownIterations',
  'recordLimit',
  'maxRecordEvents',
  'train',
  'background',
  'onSwitch',
] as const;

type Settings = Required<Omit<AdaptiveOptions, 'onSwitch' | 'train'>> & Pick<AdaptiveOptions, 'onSwitch' | 'train'>;

/** Validates `options.adaptive` (true means every default). */
export function checkAdaptiveOptions(value: unknown): Settings {
  const o = value === true ? {} : checkOptions<AdaptiveOptions>(value, 'options.adaptive', ADAPTIVE_OPTIONS);
  const integer = (key: keyof AdaptiveOptions, fallback: number, min: number, max = 1e9) =>
    o[key] === undefined ? fallback : checkInteger(o[key], `options.adaptive.${key}`, min, max);
  const stableIterations = integer('stableIterations', 2, 2, 1000);
  const threshold = o.replanThreshold ?? 0.01;
  if (typeof threshold !== 'number' || !(threshold >= 0 && threshold <= 1)) {
    throw invalidArgument('range', `options.adaptive.replanThreshold must be a fraction between 0 and 1, got ${describe(threshold)}`);
  }
  if (o.onSwitch !== undefined) checkFunction(o.onSwitch, 'options.adaptive.onSwitch');
  if (o.train !== undefined) {
    checkOptions(o.train, 'options.adaptive.train', ['interval', 'order', 'candidates', 'share']);
  }
  return {
    warmupIterations: integer('warmupIterations', 1, 0),
    stableIterations,
    maxPatterns: integer('maxPatterns', 8, 1, 1000),
    replanThreshold: threshold,
    replanAfter: integer('replanAfter', 2, 1),
    cooldownIterations: integer('cooldownIterations', 4, 0),
    recordLimit: integer('recordLimit', Math.max(32, stableIterations), stableIterations),
    maxRecordEvents: integer('maxRecordEvents', DEFAULT_RECORD_EVENTS, 16, 2 ** 40),
    train: o.train,
    background: o.background === undefined ? true : checkBoolean(o.background, 'options.adaptive.background'),
    onSwitch: o.onSwitch,
  };
}

interface Pattern {
  allocs: number;
  bytes: number;
  sizeHash: number;
}

/** A recorded iteration: the number of its first recorded event, and its pattern. */
interface Recorded {
  from: number;
  pattern: Pattern;
}

interface Window {
  /** Number of the first recorded event of its first iteration. */
  from: number;
  iterations: number;
  patterns: number;
}

/** A switch under way: trained, its arena being built. */
interface PendingSwitch {
  plan: Plan;
  trace: Trace;
  reason: PlanSwitch['reason'];
  trigger: IterationReport | null;
  trainMs: number;
  trainedOn: PlanSwitch['trainedOn'];
  switchMs: number;
  /** performance.now() when training ended, and the iterations completed when it started. */
  started: number;
  iteration: number;
  /** Why building the arena failed, once it did. */
  error: string | null;
}

/** Training under way on a worker thread: the recorded trace, what the plan will say of it, and the
 *  iterations completed when it started. */
interface RunningTraining {
  job: BackgroundTraining;
  trace: Trace;
  training: Record<string, unknown>;
  iteration: number;
}

const HISTORY = 32;

export class Adaptation {
  readonly #native: NativeControlledPool;
  readonly #settings: Settings;
  #mode: AdaptiveMode;
  #plan: Plan | null;
  #iteration = 0;
  #nextStart = 0; // recorder event number at which the iteration under way began
  #recordedSince = 0; // the recorder has run without a gap since this event number
  #window: Window | null = null;
  #recorded: Recorded[] = []; // the iterations of this attempt, oldest first (at most recordLimit)
  #attempt = 0; // iterations recorded in this attempt
  #sinceChange = 0; // iterations since the last switch or abandoned attempt
  #cooldown: number;
  #driftStreak = 0;
  #trigger: IterationReport | null = null;
  #switches = 0;
  #replans = 0;
  #abandoned = 0;
  #lastSwitch: PlanSwitch | null = null;
  #history: Omit<PlanSwitch, 'plan' | 'trace'>[] = [];
  #lastError: string | null = null;
  #training: RunningTraining | null = null;
  #pending: PendingSwitch | null = null;

  /** `plan`: the pool's starting plan, if it was given one (the pool starts planned, after the warm-up). */
  constructor(nativePool: NativeControlledPool, settings: Settings, plan: Plan | null) {
    this.#native = nativePool;
    this.#settings = settings;
    this.#plan = plan;
    this.#cooldown = settings.cooldownIterations;
    this.#mode = settings.warmupIterations > 0 ? 'warm-up' : plan ? 'planned' : 'recording';
    if (this.#mode === 'recording') this.#startRecording(0);
  }

  get onSwitch(): ((event: PlanSwitch) => void) | undefined {
    return this.#settings.onSwitch;
  }

  /** The plan trained last (or the starting one), or null. */
  get plan(): Plan | null {
    return this.#plan;
  }

  /** Called by Pool.markIteration() with what the iteration that ended asked for. */
  step(s: NativeIterationSummary): PlanSwitch | null {
    const started = this.#nextStart;
    this.#nextStart = s.recorderEnd;
    if (s.allocs > 0) this.#iteration++;
    if (s.installed && this.#pending) return this.#switched(s.installed);
    if (s.allocs === 0) return null;
    switch (this.#mode) {
      case 'warm-up':
        if (this.#iteration >= this.#settings.warmupIterations) {
          if (this.#plan) this.#enterPlanned();
          else this.#startRecording(s.recorderEnd);
        }
        return null;
      case 'unplanned':
        if (++this.#sinceChange > this.#cooldown) this.#startRecording(s.recorderEnd);
        return null;
      case 'planned':
        this.#watchDrift(s);
        return null;
      case 'recording':
        return this.#collect(s, started);
      case 'training':
        return this.#collectTraining();
      case 'switching':
        if (this.#pending!.error) {
          const why = this.#pending!.error;
          this.#pending = null;
          this.#abandon(`the switch failed: ${why}`);
        }
        return null;
    }
  }

  stats(): AdaptiveStats {
    const state = this.#native.recordingState();
    return {
      mode: this.#mode,
      iteration: this.#iteration,
      switches: this.#switches,
      replans: this.#replans,
      abandoned: this.#abandoned,
      driftStreak: this.#driftStreak,
      recordedEvents: state.end - state.begin,
      lastSwitch: this.#lastSwitch,
      history: [...this.#history],
      lastError: this.#lastError,
      ready:
        (this.#mode === 'training' && this.#training!.job.settled) ||
        (this.#mode === 'switching' && (this.#pending!.error !== null || this.#native.stats().preparedGeneration !== 0)),
    };
  }

  /** The pool closed: training under way stops (a switch being built is dropped by the native pool). */
  close(): void {
    if (!this.#training) return;
    this.#training.job.cancel();
    this.#training = null;
    this.#abandon('the pool closed while the plan was trained');
  }

  #report(s: NativeIterationSummary): IterationReport {
    return {
      iteration: this.#iteration,
      allocs: s.allocs,
      osFallbacks: s.osFallbacks + s.osOversize,
      unplannedBorrows: s.unplannedBorrows,
    };
  }

  #watchDrift(s: NativeIterationSummary): void {
    if (++this.#sinceChange <= this.#cooldown) return;
    const report = this.#report(s);
    if (report.osFallbacks + report.unplannedBorrows > this.#settings.replanThreshold * report.allocs) {
      this.#driftStreak++;
      if (this.#driftStreak >= this.#settings.replanAfter) {
        this.#trigger = report;
        this.#startRecording(s.recorderEnd);
      }
    } else {
      this.#driftStreak = 0;
    }
  }

  #collect(s: NativeIterationSummary, started: number): PlanSwitch | null {
    if (!this.#native.recordingState().on) {
      // The recorder filled up (maxRecordEvents) and stopped: start over from here.
      this.#lastError = `an iteration recorded more than ${this.#settings.maxRecordEvents} events (raise adaptive.maxRecordEvents)`;
      this.#window = null;
      this.#native.discardRecording(s.recorderEnd);
      this.#native.startRecording(this.#settings.maxRecordEvents);
      this.#recordedSince = s.recorderEnd;
      return this.#countAttempt();
    }
    if (started < this.#recordedSince) return null; // began before the recorder did
    this.#recorded.push({ from: started, pattern: { allocs: s.allocs, bytes: s.bytes, sizeHash: s.sizeHash } });
    if (this.#recorded.length > this.#settings.recordLimit) this.#recorded.shift();
    this.#native.discardRecording(this.#recorded[0].from);
    this.#window = stableWindow(this.#recorded, this.#settings.stableIterations, this.#settings.maxPatterns);
    if (this.#window) {
      const switched = this.#trainAndSwitch();
      if (switched) return switched;
    }
    return this.#countAttempt();
  }

  #countAttempt(): null {
    if (this.#mode === 'recording' && ++this.#attempt >= this.#settings.recordLimit) {
      this.#abandon(
        this.#lastError ??
          `no window of recorded iterations held each of at most ${this.#settings.maxPatterns} pattern(s) ${this.#settings.stableIterations} times`,
      );
    }
    return null;
  }

  /**
   * Trains on the window: with `background`, on a worker thread (→ training; the mark that takes its plan
   * switches), else here, switching at once.
   */
  #trainAndSwitch(): PlanSwitch | null {
    const window = this.#window!;
    const last = this.#iteration;
    const trace = traceFromRecording(
      this.#native.copyRecording(window.from),
      `recorded iterations ${last - window.iterations + 1}-${last}`,
    );
    const options: TrainOptions = { order: 'auto', ...this.#settings.train };
    const training = { adaptive: true, patterns: window.patterns };
    // Where no worker can start (the compiled entry is missing, or Node's permission model refuses
    // worker_threads), training runs here.
    const job = this.#settings.background ? BackgroundTraining.start(trace, options) : null;
    if (job) {
      this.#training = { job, trace, training, iteration: last };
      this.#stopRecording();
      this.#mode = 'training';
      return null;
    }
    const started = performance.now();
    let plan: Plan;
    try {
      plan = train(trace, options);
    } catch (error) {
      this.#abandon(`training failed: ${(error as Error).message}`);
      return null;
    }
    return this.#switchTo(withTraining(plan, training), trace, performance.now() - started, last, 'thread');
  }

  /** The mark after the worker finished training takes its plan and switches to it. */
  #collectTraining(): PlanSwitch | null {
    const { job, trace, training, iteration } = this.#training!;
    const outcome = job.poll();
    if (!outcome) return null;
    this.#training = null;
    if ('error' in outcome) {
      this.#abandon(`training failed: ${outcome.error}`);
      return null;
    }
    return this.#switchTo(withTraining(outcome.plan, training), trace, outcome.trainMs, iteration, 'worker');
  }

  /**
   * Switches to `plan`, trained on `trace` from the iterations completed at `iteration`: in the background
   * (→ switching) or at once.
   */
  #switchTo(plan: Plan, trace: Trace, trainMs: number, iteration: number, trainedOn: PlanSwitch['trainedOn']): PlanSwitch | null {
    if (this.#plan && sameClasses(this.#plan, plan)) {
      this.#abandon('the re-trained plan is the serving plan: re-planning cannot help');
      return null;
    }
    const pending: PendingSwitch = {
      plan,
      trace,
      reason: this.#trigger ? 'drift' : 'warm-up',
      trigger: this.#trigger,
      trainMs,
      trainedOn,
      switchMs: 0,
      started: performance.now(),
      iteration,
      error: null,
    };
    try {
      if (this.#settings.background) {
        this.#native.prepareSwitch(toNativePlan(plan)).catch((error: unknown) => {
          pending.error = (fromNative(error) as Error).message;
        });
      } else {
        this.#native.switchPlan(toNativePlan(plan));
      }
    } catch (error) {
      this.#abandon(`the switch failed: ${(fromNative(error) as Error).message}`);
      return null;
    }
    pending.switchMs = performance.now() - pending.started;
    this.#pending = pending;
    if (!this.#settings.background) return this.#switched(this.#native.stats().generation);
    this.#stopRecording();
    this.#mode = 'switching';
    return null;
  }

  /** The pending switch now serves, as `generation`. */
  #switched(generation: number): PlanSwitch {
    const pending = this.#pending!;
    this.#pending = null;
    const event: PlanSwitch = {
      generation,
      iteration: this.#iteration,
      waitedIterations: this.#iteration - pending.iteration,
      background: this.#settings.background,
      reason: pending.reason,
      trigger: pending.trigger,
      plan: pending.plan,
      trace: pending.trace,
      trainMs: pending.trainMs,
      trainedOn: pending.trainedOn,
      switchMs: pending.switchMs,
      readyMs: performance.now() - pending.started,
    };
    this.#plan = event.plan;
    this.#switches++;
    if (event.reason === 'drift') this.#replans++;
    this.#lastSwitch = event;
    const { plan: _plan, trace: _trace, ...summary } = event;
    this.#history.push(summary);
    if (this.#history.length > HISTORY) this.#history.shift();
    this.#cooldown = this.#settings.cooldownIterations;
    this.#lastError = null;
    this.#enterPlanned();
    return event;
  }

  #startRecording(from: number): void {
    this.#mode = 'recording';
    this.#window = null;
    this.#recorded = [];
    this.#attempt = 0;
    this.#recordedSince = from;
    this.#native.discardRecording(from);
    this.#native.startRecording(this.#settings.maxRecordEvents);
  }

  #stopRecording(): void {
    this.#native.stopRecording();
    this.#native.discardRecording(Number.MAX_SAFE_INTEGER);
    this.#window = null;
    this.#recorded = [];
  }

  #enterPlanned(): void {
    this.#stopRecording();
    this.#mode = 'planned';
    this.#sinceChange = 0;
    this.#driftStreak = 0;
    this.#trigger = null;
  }

  #abandon(why: string): void {
    this.#lastError = why;
    this.#abandoned++;
    this.#stopRecording();
    this.#cooldown = Math.min(Math.max(1, this.#cooldown) * 2, 2 ** 20);
    this.#sinceChange = 0;
    this.#driftStreak = 0;
    this.#trigger = null;
    this.#mode = this.#plan ? 'planned' : 'unplanned';
  }
}

function samePattern(a: Pattern, b: Pattern): boolean {
  return a.allocs === b.allocs && a.bytes === b.bytes && a.sizeHash === b.sizeHash;
}

function sameClasses(a: Plan, b: Plan): boolean {
  return (
    a.interval === b.interval &&
    a.classes.length === b.classes.length &&
    a.classes.every((c, i) => c.size === b.classes[i].size && c.blocks === b.classes[i].blocks)
  );
}

/** The plan with more said about how it was trained. */
function withTraining(plan: Plan, training: Record<string, unknown>): Plan {
  return new Plan(plan, { lowerBound: plan.lowerBound, source: plan.source, training: { ...plan.training, ...training } });
}

/**
 * The longest run of the latest recorded iterations in which every pattern occurs at least `times` times
 * and at most `maxPatterns` patterns occur, or null. (A pattern seen once, like a first step's, keeps the
 * window from reaching back past it.)
 */
function stableWindow(recorded: Recorded[], times: number, maxPatterns: number): Window | null {
  return windowOf(recorded, times, maxPatterns, samePattern) ?? windowOf(recorded, times, maxPatterns, nearPattern);
}

/**
 * Within 2% in allocations and in bytes: an iteration with a stray allocation or two (a thread or a
 * one-off buffer of a process recorded under the preload library) still counts as its pattern's.
 * Training lays out what was recorded, and the schedule lets such strays miss alone.
 */
function nearPattern(a: Pattern, b: Pattern): boolean {
  const near = (x: number, y: number) => Math.abs(x - y) <= 0.02 * Math.max(x, y);
  return near(a.allocs, b.allocs) && near(a.bytes, b.bytes);
}

function windowOf(recorded: Recorded[], times: number, maxPatterns: number, same: (a: Pattern, b: Pattern) => boolean): Window | null {
  for (let first = 0; first < recorded.length; first++) {
    const counts: { pattern: Pattern; n: number }[] = [];
    for (let i = first; i < recorded.length && counts.length <= maxPatterns; i++) {
      const seen = counts.find((c) => same(c.pattern, recorded[i].pattern));
      if (seen) seen.n++;
      else counts.push({ pattern: recorded[i].pattern, n: 1 });
    }
    if (counts.length <= maxPatterns && counts.every((c) => c.n >= times)) {
      return { from: recorded[first].from, iterations: recorded.length - first, patterns: counts.length };
    }
  }
  return null;
}

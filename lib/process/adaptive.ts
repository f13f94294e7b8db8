/**
 * Adaptive mode: the pool records a window of its latest iterations, trains a plan from them as soon as an
 * input shape has repeated, switches to it without a restart, and follows the workload from there: a new
 * shape, or a plan that no longer fits, trains a plan on the window again (the shapes seen lately, the new
 * one included), and a plan whose shapes have gone from the window is replaced by a smaller one. The policy
 * lives here; the native pool records (native/core/recorder.h), sums each iteration up at markIteration() and
 * switches arenas (Pool::switchPlan, or Pool::prepareSwitch off the JS thread, installed by the next
 * markIteration()); a switch gives the retired arena's free pages back to the OS. One instance belongs to
 * one Pool. The process pool runs it under `tensorpool run --adaptive` (TENSORPOOL_ADAPTIVE=1), not by
 * default.
 *
 * Modes, per completed iteration (the allocations between two markIteration() calls; iterations with no
 * allocation are ignored):
 *   warm-up    the first `warmupIterations`: nothing is recorded (a first step allocates state once).
 *   recording  no plan yet: the default classes serve while iterations are recorded. Once the iteration
 *              that ended repeats a pattern seen `stableIterations` times in the window (one input shape
 *              seen twice: buffers crossing an iteration boundary are in the recording), or `maxPatterns`
 *              patterns have been recorded, a plan is trained on every recorded iteration (one schedule per
 *              iteration, so it serves each pattern recorded) → training (or, without `background`, the
 *              pool switches at once → planned).
 *   planned    the window goes on recording (its latest `recordLimit` iterations). An iteration drifts when
 *              its off-plan allocations (OS fallbacks, oversize requests, borrows the schedule did not call
 *              for, blocks a growing pool carved) exceed `replanThreshold` of them. Outside the
 *              `cooldownIterations` after a switch, a pattern the plan was not trained on (a new shape) that
 *              drifted re-plans once the window holds it `stableIterations` times (until then a growing pool
 *              grows for it: a one-off iteration is no shape), a known pattern once it drifted on its
 *              `replanAfter` latest occurrences (other shapes of a cycle may come between; not counting those that began with more blocks live than any the plan
 *              was trained on: buffers a garbage collector frees late): a plan is trained on the window →
 *              training. Every `recordLimit` iterations, when a pattern the plan was trained on is no longer
 *              in the window, a plan is trained on the window and switched to if its arena is at least 10%
 *              smaller (the shapes that left give their memory back).
 *   training   the plan is trained on a worker thread (lib/process/background-training.ts) while the serving classes
 *              go on serving; the first markIteration() after it finished takes the plan → switching.
 *   switching  the new plan's arena is being mapped and pre-faulted on a libuv thread while the serving
 *              classes go on serving; the first markIteration() after it is ready installs it → planned.
 *   unplanned  no plan yet and training failed: the default classes serve; it is tried again after the
 *              cooldown.
 * No mark waits for the background: one at which the work is not done goes on with the serving classes, and
 * a later one moves on. A plan trained on a worker at mark M therefore serves from mark M + 2 at the
 * earliest, later where the work took longer than the iterations between.
 * Determinism: what is trained depends only on the iterations marked (the window at the mark that decided,
 * counted in marks), never on how long the background took. When a plan starts serving, and so every later
 * decision, depends on it too, unless the program waits for the work before each mark (whenReady(), which
 * Pool.adaptiveReady() gives; or stats().ready): then a plan trained at mark M serves from M + 2 on every
 * run. Nothing is judged while a plan is trained or built.
 * Hysteresis, so a run cannot make the pool flap: a new pattern must repeat, a known one drift on
 * `replanAfter` occurrences in a row;
 * nothing is judged during a cooldown; a re-trained plan identical to the serving one is not switched to and
 * doubles the cooldown, and so do re-plans that follow each other closely (a successful plan that holds
 * resets it).
 *
 * "Same pattern": within 2% in allocations and in requested bytes (native/core/pool.h IterationSummary): an
 * iteration with a stray allocation or two (another thread's, a one-off buffer of a process under the
 * preload library) still counts as its pattern's.
 */
import { BackgroundTraining } from './background-training.js';
import { fromNative } from '../errors.js';
import type { NativeControlledPool, NativeIterationSummary } from '../native.js';
import { Plan } from '../plan/plan.js';
import { toNativePlan } from '../plan/plan-spec.js';
import { DEFAULT_RECORD_EVENTS, traceFromRecording } from '../plan/recording.js';
import type { Trace } from '../trace/trace.js';
import { train, type TrainOptions } from '../plan/train.js';
import { checkBoolean, checkFunction, checkInteger, checkOptions, describe, invalidArgument } from '../validate.js';

/**
 * Adaptive mode (PoolOptions.adaptive): the pool records its own iterations, trains a plan from them and
 * switches to it at a mark, again when the pattern drifts.
 */
export interface AdaptiveOptions {
  /** Iterations to let pass before recording. Default 1. */
  warmupIterations?: number;
  /** The first plan is trained once a pattern (an input shape) has been recorded this many times (at least
   *  2, so that buffers crossing an iteration boundary are planned for). Default 2. */
  stableIterations?: number;
  /** ... or once this many different patterns have been recorded, none of them repeated. Default 8. */
  maxPatterns?: number;
  /** Off-plan allocations, as a fraction of an iteration's allocations, above which it drifts. Default 0.01. */
  replanThreshold?: number;
  /** Occurrences in a row on which a known pattern drifted that start a re-plan (other patterns may come
   *  between). Default 2. */
  replanAfter?: number;
  /** Iterations after a switch during which drift is not judged. Default 4. */
  cooldownIterations?: number;
  /** The window: the latest iterations recorded, which re-plans are trained on. Default 32: a cycle of 8
   *  input shapes seen four times. */
  recordLimit?: number;
  /** Recorded events held at most (16 bytes each). Default 4 Mi events (64 MiB). */
  maxRecordEvents?: number;
  /** How plans are trained (train()'s interval, order, candidates). Default: interval and order 'auto'. */
  train?: Omit<TrainOptions, 'iteration'>;
  /**
   * Train the plan on a worker thread, then build its arena (map and pre-fault it) on a libuv thread, while
   * the serving classes go on serving; switch at the first markIteration() after both are done: no mark
   * waits, and the iteration at which the plan starts serving depends on how long they took, unless the
   * program awaits pool.adaptiveReady() before each mark. false: train and switch inside the
   * markIteration() that completed the window, which then waits for both (training takes up to seconds on
   * long recordings; pre-faulting about a second per GiB), at the same iteration on every run. Default true.
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
  /** Served by a block the pool carved for it (a pool that grows: the plan had no free block that fits). */
  grown: number;
  /** Whether its pattern is none of those the serving plan was trained on (a new input shape). */
  newPattern: boolean;
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
  /** 'warm-up': the first plan; 'drift': a re-plan (a new shape, or off-plan allocations); 'shrink': a
   *  smaller plan for the shapes left in the window. */
  reason: 'warm-up' | 'drift' | 'shrink';
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
  /** Re-plans given up (a plan identical to the serving one, or a failure). */
  abandoned: number;
  /** Occurrences in a row on which the pattern of the last iteration drifted (a known pattern). */
  driftStreak: number;
  /** Events held by the recorder now (the window's). */
  recordedEvents: number;
  /** Patterns (input shapes) the serving plan was trained on. */
  patterns: number;
  lastSwitch: PlanSwitch | null;
  /** The last 32 switches, without their plans and traces. */
  history: Omit<PlanSwitch, 'plan' | 'trace'>[];
  /** Why the last attempt was abandoned, or null. */
  lastError: string | null;
  /** Training or switching: the work the mode waits for (the worker's training, or building the arena) is
   *  done, so the next markIteration() moves on (Pool.adaptiveReady() resolves then). false in the other
   *  modes. */
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
}

/** A recorded iteration: the number of its first recorded event, its pattern, and the blocks live as it began. */
interface Recorded {
  from: number;
  pattern: Pattern;
  carried: number;
}

/** What a plan under way is for: why it is trained, on which patterns, and (a re-plan) what triggered it. */
interface Purpose {
  reason: PlanSwitch['reason'];
  trigger: IterationReport | null;
  /** The window's patterns, and those it held at least twice. */
  patterns: Pattern[];
  repeated: Pattern[];
  /** The most blocks live at the start of one of the window's iterations. */
  carried: number;
}

/** A switch under way: trained, its arena being built. */
interface PendingSwitch extends Purpose {
  plan: Plan;
  trace: Trace;
  trainMs: number;
  trainedOn: PlanSwitch['trainedOn'];
  switchMs: number;
  /** performance.now() when training ended, and the iterations completed when it started. */
  started: number;
  iteration: number;
  /** Why building the arena failed, once it did. */
  error: string | null;
  /** Settles once the arena is built or its building failed (at once for a switch made on this thread). */
  built: Promise<void>;
}

/** Training under way on a worker thread: what the plan is for, and the iterations completed when it started. */
interface RunningTraining {
  job: BackgroundTraining;
  purpose: Purpose;
  iteration: number;
}

const HISTORY = 32;
/** Allocations by which an iteration may differ from its pattern's (other threads' strays). */
const STRAY_ALLOCATIONS = 2;
/** A shrink switches only to a plan whose arena is at most this fraction of the serving one's. */
const SHRINK_GAIN = 0.9;
/** The cooldown never doubles beyond this many iterations. */
const MAX_COOLDOWN = 1024;

export class Adaptation {
  readonly #native: NativeControlledPool;
  readonly #settings: Settings;
  #mode: AdaptiveMode;
  #plan: Plan | null;
  #trained: Pattern[] | null; // the patterns the serving plan was trained on (null: a plan given, not trained here)
  #kept: Pattern[] = []; // of them, those a shrink keeps the plan for
  #iteration = 0;
  #nextStart = 0; // recorder event number at which the iteration under way began
  #recording = false;
  #recordedSince = 0; // the recorder has run without a gap since this event number
  #recorded: Recorded[] = []; // the window, oldest first (at most recordLimit)
  #sinceChange = 0; // iterations judged since the last switch or given-up re-plan
  #lastSwitchAt = 0; // the iteration of the last switch
  #cooldown: number;
  #driftStreak = 0;
  // Known patterns that drifted, each with the occurrences in a row on which it did: in a cycle of input
  // shapes, one shape the plan serves badly drifts every time it comes, between shapes that do not.
  #drifting: { pattern: Pattern; streak: number }[] = [];
  #leftPlan: Pattern[] = []; // new patterns that left the serving plan, waiting to repeat
  #carried = 0; // blocks live at the last mark: carried into the iteration under way
  #trainedCarried = Infinity; // the most blocks carried into an iteration the serving plan was trained on
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
    this.#trained = plan ? null : [];
    this.#cooldown = settings.cooldownIterations;
    this.#mode = settings.warmupIterations > 0 ? 'warm-up' : plan ? 'planned' : 'recording';
    if (this.#mode !== 'warm-up') this.#startRecording(0);
  }

  get onSwitch(): ((event: PlanSwitch) => void) | undefined {
    return this.#settings.onSwitch;
  }

  /** The plan trained last (or the starting one), or null. */
  get plan(): Plan | null {
    return this.#plan;
  }

  /**
   * Settles once the work the mode waits for is done (stats().ready): the worker's training in 'training',
   * building the arena in 'switching'; at once in the other modes. Waits without blocking the thread: the
   * event loop runs meanwhile, and a pending training keeps the process alive until it ends.
   */
  async whenReady(): Promise<void> {
    if (this.#mode === 'training') await this.#training!.job.finished();
    else if (this.#mode === 'switching') await this.#pending!.built;
  }

  /** Called by Pool.markIteration() with what the iteration that ended asked for. */
  step(s: NativeIterationSummary): PlanSwitch | null {
    const started = this.#nextStart;
    this.#nextStart = s.recorderEnd;
    const carried = this.#carried;
    this.#carried = s.liveBlocks;
    if (s.allocs > 0) {
      this.#iteration++;
      if (this.#recording) this.#remember(s, started, carried);
    }
    if (s.installed && this.#pending) return this.#switched(s.installed);
    if (s.allocs === 0) return null;
    switch (this.#mode) {
      case 'warm-up':
        if (this.#iteration >= this.#settings.warmupIterations) {
          this.#startRecording(s.recorderEnd);
          this.#mode = this.#plan ? 'planned' : 'recording';
        }
        return null;
      case 'recording':
        return this.#learnt() ? this.#train(this.#purpose('warm-up', null)) : null;
      case 'unplanned':
        if (++this.#sinceChange <= this.#cooldown || this.#recorded.length === 0) return null;
        return this.#train(this.#purpose('warm-up', null));
      case 'planned':
        return this.#watch(s, carried);
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
      patterns: this.#trained?.length ?? 0,
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

  /** Adds the iteration that ended (its events began at `started`, with `carried` blocks live) to the window. */
  #remember(s: NativeIterationSummary, started: number, carried: number): void {
    if (!this.#native.recordingState().on) {
      // The recorder filled up (maxRecordEvents) and stopped: the window starts over from here.
      this.#lastError = `the window held more than ${this.#settings.maxRecordEvents} events (raise adaptive.maxRecordEvents or lower adaptive.recordLimit)`;
      this.#startRecording(s.recorderEnd);
      return;
    }
    if (started < this.#recordedSince) return; // began before the recorder did
    this.#recorded.push({ from: started, pattern: { allocs: s.allocs, bytes: s.bytes }, carried });
    if (this.#recorded.length > this.#settings.recordLimit) this.#recorded.shift();
    this.#native.discardRecording(this.#recorded[0].from);
  }

  /** No plan yet: whether the window holds enough to train the first one. */
  #learnt(): boolean {
    const recorded = this.#recorded;
    if (recorded.length === 0) return false;
    const latest = recorded[recorded.length - 1].pattern;
    const repeats = recorded.filter((r) => nearPattern(r.pattern, latest)).length;
    return (
      repeats >= this.#settings.stableIterations ||
      this.#windowPatterns().length >= this.#settings.maxPatterns ||
      recorded.length >= this.#settings.recordLimit
    );
  }

  /** The different patterns of the window, each once; with `times`, those it holds at least that often. */
  #windowPatterns(times = 1): Pattern[] {
    const counts: { pattern: Pattern; n: number }[] = [];
    for (const r of this.#recorded) {
      const seen = counts.find((c) => nearPattern(c.pattern, r.pattern));
      if (seen) seen.n++;
      else counts.push({ pattern: r.pattern, n: 1 });
    }
    return counts.filter((c) => c.n >= times).map((c) => c.pattern);
  }

  #purpose(reason: Purpose['reason'], trigger: IterationReport | null): Purpose {
    const carried = Math.max(0, ...this.#recorded.map((r) => r.carried));
    return { reason, trigger, patterns: this.#windowPatterns(), repeated: this.#windowPatterns(2), carried };
  }

  #report(s: NativeIterationSummary): IterationReport {
    const pattern = { allocs: s.allocs, bytes: s.bytes };
    return {
      iteration: this.#iteration,
      allocs: s.allocs,
      osFallbacks: s.osFallbacks + s.osOversize,
      unplannedBorrows: s.unplannedBorrows,
      grown: s.grown,
      newPattern: this.#trained !== null && !this.#trained.some((p) => nearPattern(p, pattern)),
    };
  }

  /**
   * Planned: re-plans on sustained drift, or shrinks when shapes have left the window. A new shape that left
   * the plan is re-planned for once it has repeated (a one-off iteration, such as one in which another
   * thread or a garbage collector allocated, is no shape to plan for); until then the pool serves it as it
   * can (a growing pool grows). A known shape re-plans once it drifted on its `replanAfter` latest occurrences,
   * not counting those that began with more blocks live than any iteration the plan was trained on (`carried`):
   * buffers of earlier iterations a garbage collector frees late hold the plan's blocks, which no plan of
   * this shape can foresee; the pool serves the iteration as it can, and the next ones once they are freed.
   */
  #watch(s: NativeIterationSummary, carried: number): PlanSwitch | null {
    const report = this.#report(s);
    const limit = this.#settings.replanThreshold * report.allocs;
    const pattern = { allocs: s.allocs, bytes: s.bytes };
    if (report.newPattern && report.osFallbacks + report.unplannedBorrows + report.grown > limit && !this.#leftPlan.some((p) => nearPattern(p, pattern))) {
      this.#leftPlan.push(pattern);
    }
    if (++this.#sinceChange <= this.#cooldown) return null;
    if (report.newPattern && this.#leftPlan.some((p) => nearPattern(p, pattern))) {
      const seen = this.#recorded.filter((r) => nearPattern(r.pattern, pattern)).length;
      return seen >= this.#settings.stableIterations ? this.#train(this.#purpose('drift', report)) : null;
    }
    const drifting = this.#drifting.find((d) => nearPattern(d.pattern, pattern));
    if (!report.newPattern && report.osFallbacks + report.unplannedBorrows + report.grown > limit) {
      if (carried > this.#trainedCarried) return null;
      const d = drifting ?? { pattern, streak: 0 };
      if (!drifting) this.#drifting.push(d);
      this.#driftStreak = ++d.streak;
      return d.streak >= this.#settings.replanAfter ? this.#train(this.#purpose('drift', report)) : null;
    }
    if (drifting) this.#drifting.splice(this.#drifting.indexOf(drifting), 1);
    this.#driftStreak = 0;
    const { recordLimit } = this.#settings;
    if (this.#sinceChange % recordLimit === 0 && this.#recorded.length === recordLimit && this.#kept.length > 0) {
      const patterns = this.#windowPatterns();
      if (this.#kept.some((t) => !patterns.some((p) => nearPattern(p, t)))) return this.#train(this.#purpose('shrink', null));
    }
    return null;
  }

  /**
   * Trains on the window: with `background`, on a worker thread (→ training; the mark that takes its plan
   * switches), else here, switching at once.
   */
  #train(purpose: Purpose): PlanSwitch | null {
    const window = this.#recorded;
    const last = this.#iteration;
    const recording = this.#native.copyRecording(window[0].from);
    const name = `recorded iterations ${last - window.length + 1}-${last}`;
    // A switch installs a plan of blocks in this pool: the spans kind is what `tensorpool run --plan` serves.
    const options: TrainOptions = { order: 'auto', ...this.#settings.train, serve: 'classes' };
    // Where no worker can start (the compiled entry is missing, or Node's permission model refuses
    // worker_threads), training runs here.
    const job = this.#settings.background ? BackgroundTraining.start(recording, name, options) : null;
    if (job) {
      this.#training = { job, purpose, iteration: last };
      this.#mode = 'training';
      return null;
    }
    const trace = traceFromRecording(recording, name);
    const started = performance.now();
    let plan: Plan;
    try {
      plan = train(trace, options);
    } catch (error) {
      this.#abandon(`training failed: ${(error as Error).message}`);
      return null;
    }
    return this.#switchTo(withTraining(plan, purpose), trace, purpose, performance.now() - started, last, 'thread');
  }

  /** A mark after the worker finished training takes its plan and builds its arena in the background. */
  #collectTraining(): PlanSwitch | null {
    const { job, purpose, iteration } = this.#training!;
    const outcome = job.poll();
    if (!outcome) return null;
    this.#training = null;
    if ('error' in outcome) {
      this.#abandon(`training failed: ${outcome.error}`);
      return null;
    }
    return this.#switchTo(withTraining(outcome.plan, purpose), outcome.trace, purpose, outcome.trainMs, iteration, 'worker');
  }

  /**
   * Switches to `plan`, trained on `trace` from the iterations completed at `iteration`: in the background
   * (→ switching) or at once.
   */
  #switchTo(
    plan: Plan,
    trace: Trace,
    purpose: Purpose,
    trainMs: number,
    iteration: number,
    trainedOn: PlanSwitch['trainedOn'],
    background = this.#settings.background,
  ): PlanSwitch | null {
    if (purpose.reason === 'shrink' && !(plan.arenaBytes <= SHRINK_GAIN * this.#plan!.arenaBytes)) {
      // The shapes that left cost little: the serving plan stays, and serves the window's shapes (it was
      // trained on more), which are what the next shrink looks for.
      this.#mode = 'planned';
      this.#sinceChange = this.#cooldown;
      this.#kept = purpose.repeated;
      return null;
    }
    if (this.#plan && sameClasses(this.#plan, plan)) {
      this.#abandon('the re-trained plan is the serving plan: re-planning cannot help');
      return null;
    }
    const pending: PendingSwitch = {
      ...purpose,
      plan,
      trace,
      trainMs,
      trainedOn,
      switchMs: 0,
      started: performance.now(),
      iteration,
      error: null,
      built: Promise.resolve(),
    };
    try {
      if (background) {
        pending.built = this.#native.prepareSwitch(toNativePlan(plan)).then(
          () => undefined,
          (error: unknown) => {
            pending.error = (fromNative(error) as Error).message;
          },
        );
      } else {
        this.#native.switchPlan(toNativePlan(plan));
      }
    } catch (error) {
      this.#abandon(`the switch failed: ${(fromNative(error) as Error).message}`);
      return null;
    }
    pending.switchMs = performance.now() - pending.started;
    this.#pending = pending;
    if (!background) return this.#switched(this.#native.stats().generation);
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
    // Re-plans that follow each other closely (shapes that keep changing) wait longer each time.
    const closely = event.reason === 'drift' && this.#switches > 0 && this.#iteration - this.#lastSwitchAt <= 2 * this.#cooldown + 4;
    this.#cooldown = closely ? Math.min(Math.max(1, this.#cooldown) * 2, MAX_COOLDOWN) : this.#settings.cooldownIterations;
    this.#plan = event.plan;
    this.#trained = pending.patterns;
    this.#trainedCarried = pending.carried;
    // What a shrink keeps the plan for: the patterns the window held twice (a one-off iteration, such as
    // one in which a thread started, is no shape to keep a plan for).
    this.#kept = pending.repeated;
    this.#switches++;
    this.#lastSwitchAt = this.#iteration;
    if (event.reason === 'drift') this.#replans++;
    this.#lastSwitch = event;
    const { plan: _plan, trace: _trace, ...summary } = event;
    this.#history.push(summary);
    if (this.#history.length > HISTORY) this.#history.shift();
    this.#lastError = null;
    this.#enterPlanned();
    return event;
  }

  /** The window starts (again) at event `from`. */
  #startRecording(from: number): void {
    this.#recording = true;
    this.#recorded = [];
    this.#recordedSince = from;
    this.#native.discardRecording(from);
    this.#native.startRecording(this.#settings.maxRecordEvents);
  }

  #enterPlanned(): void {
    this.#mode = 'planned';
    this.#sinceChange = 0;
    this.#driftStreak = 0;
    this.#drifting = [];
    this.#leftPlan = [];
  }

  #abandon(why: string): void {
    this.#leftPlan = [];
    this.#lastError = why;
    this.#abandoned++;
    this.#cooldown = Math.min(Math.max(1, this.#cooldown) * 2, MAX_COOLDOWN);
    this.#sinceChange = 0;
    this.#driftStreak = 0;
    this.#drifting = [];
    this.#mode = this.#plan ? 'planned' : 'unplanned';
  }
}

function sameClasses(a: Plan, b: Plan): boolean {
  return (
    a.interval === b.interval &&
    a.classes.length === b.classes.length &&
    a.classes.every((c, i) => c.size === b.classes[i].size && c.blocks === b.classes[i].blocks)
  );
}

/** The plan with more said about how it was trained. */
function withTraining(plan: Plan, purpose: Purpose): Plan {
  const training = { adaptive: true, reason: purpose.reason, patterns: purpose.patterns.length };
  return new Plan(plan, { lowerBound: plan.lowerBound, source: plan.source, training: { ...plan.training, ...training } });
}

/**
 * The same pattern: within 2% (or two) in allocations and within 2% in bytes. An iteration with a stray
 * allocation or two (a thread or a one-off buffer of a process recorded under the preload library) still
 * counts as its pattern's, in an iteration of a few dozen allocations too; training lays out what was
 * recorded, and the schedule lets such strays miss alone.
 */
function nearPattern(a: Pattern, b: Pattern): boolean {
  const near = (x: number, y: number) => Math.abs(x - y) <= 0.02 * Math.max(x, y);
  return (near(a.allocs, b.allocs) || Math.abs(a.allocs - b.allocs) <= STRAY_ALLOCATIONS) && near(a.bytes, b.bytes);
}

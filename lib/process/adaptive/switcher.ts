/**
 * Adaptive mode's switcher: trains a plan on the window (on a worker thread, or on this one where
 * `background` is off or no worker can start), builds its arena (on a libuv thread, or here) and makes the
 * PlanSwitch of each switch the native pool installed. It never waits: what is not done at a mark is looked
 * at again at the next one (collect(), the native mark's `installed`), and whenReady() lets a program wait
 * for it without blocking. One switcher belongs to one Adaptation, on the pool's thread.
 */
import { BackgroundTraining } from '../background-training.js';
import { fromNative } from '../../errors.js';
import type { NativeControlledPool, NativeRecording } from '../../native.js';
import { Plan } from '../../plan/plan.js';
import { toNativePlan } from '../../plan/plan-spec.js';
import { traceFromRecording } from '../../plan/recording.js';
import { train, type TrainOptions } from '../../plan/train.js';
import type { Trace } from '../../trace/trace.js';
import type { IterationReport, Purpose } from './judge.js';
import type { Settings } from './options.js';

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

/** A plan trained for a purpose, not switched to yet. */
export interface Trained {
  plan: Plan;
  /** The recorded iterations it was trained on. */
  trace: Trace;
  purpose: Purpose;
  trainMs: number;
  trainedOn: PlanSwitch['trainedOn'];
  /** Iterations completed when training started. */
  iteration: number;
}

/** What training gave: the plan, or why there is none. */
export type Training = Trained | { error: string };

/** A switch under way: trained, its arena being built. */
interface PendingSwitch extends Trained {
  switchMs: number;
  /** performance.now() when training ended. */
  started: number;
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

/** Switches kept in the history. */
const HISTORY = 32;

export class Switcher {
  readonly #native: NativeControlledPool;
  readonly #settings: Settings;
  #training: RunningTraining | null = null;
  #pending: PendingSwitch | null = null;
  #switches = 0;
  #replans = 0;
  #lastSwitch: PlanSwitch | null = null;
  #history: Omit<PlanSwitch, 'plan' | 'trace'>[] = [];

  constructor(nativePool: NativeControlledPool, settings: Settings) {
    this.#native = nativePool;
    this.#settings = settings;
  }

  /** Plans switched to; of them re-plans after drift. */
  get switches(): number {
    return this.#switches;
  }
  get replans(): number {
    return this.#replans;
  }
  get lastSwitch(): PlanSwitch | null {
    return this.#lastSwitch;
  }
  /** The last HISTORY switches, without their plans and traces. */
  get history(): Omit<PlanSwitch, 'plan' | 'trace'>[] {
    return [...this.#history];
  }

  /** Whether an arena is being built (switchTo() returned null): the next mark that installs it ends it. */
  get building(): boolean {
    return this.#pending !== null;
  }

  /** Whether the work under way is done (the worker's training, or building the arena); false when none is. */
  get ready(): boolean {
    if (this.#training) return this.#training.job.settled;
    return this.#pending !== null && (this.#pending.error !== null || this.#native.stats().preparedGeneration !== 0);
  }

  /** Settles once the work under way is done (ready), at once when none is; the thread goes on meanwhile. */
  async whenReady(): Promise<void> {
    if (this.#training) await this.#training.job.finished();
    else if (this.#pending) await this.#pending.built;
  }

  /**
   * Trains a plan for `purpose` on `recording` (the window's events, named `name`), `iteration` iterations
   * completed: with `background`, on a worker thread (null: collect() takes its plan at a later mark), else,
   * or where no worker can start (the compiled entry is missing, or Node's permission model refuses
   * worker_threads), here.
   */
  train(recording: NativeRecording, name: string, purpose: Purpose, iteration: number): Training | null {
    // A switch installs a plan of blocks in this pool: the spans kind is what `tensorpool run --plan` serves.
    const options: TrainOptions = { order: 'auto', ...this.#settings.train, serve: 'classes' };
    const job = this.#settings.background ? BackgroundTraining.start(recording, name, options) : null;
    if (job) {
      this.#training = { job, purpose, iteration };
      return null;
    }
    const trace = traceFromRecording(recording, name);
    const started = performance.now();
    let plan: Plan;
    try {
      plan = train(trace, options);
    } catch (error) {
      return { error: (error as Error).message };
    }
    return { plan: withTraining(plan, purpose), trace, purpose, trainMs: performance.now() - started, trainedOn: 'thread', iteration };
  }

  /** At a mark while the worker trains: its plan (or why there is none) once it finished, else null. */
  collect(): Training | null {
    const { job, purpose, iteration } = this.#training!;
    const outcome = job.poll();
    if (!outcome) return null;
    this.#training = null;
    if ('error' in outcome) return outcome;
    return { plan: withTraining(outcome.plan, purpose), trace: outcome.trace, purpose, trainMs: outcome.trainMs, trainedOn: 'worker', iteration };
  }

  /**
   * Switches to `trained.plan`: with `background`, builds its arena on a libuv thread (null: the native
   * mark that installs it ends the switch, installed()); else here, returning the generation now serving;
   * or why the switch failed.
   */
  switchTo(trained: Trained): number | null | { error: string } {
    const pending: PendingSwitch = { ...trained, switchMs: 0, started: performance.now(), error: null, built: Promise.resolve() };
    try {
      if (this.#settings.background) {
        pending.built = this.#native.prepareSwitch(toNativePlan(trained.plan)).then(
          () => undefined,
          (error: unknown) => {
            pending.error = (fromNative(error) as Error).message;
          },
        );
      } else {
        this.#native.switchPlan(toNativePlan(trained.plan));
      }
    } catch (error) {
      return { error: (fromNative(error) as Error).message };
    }
    pending.switchMs = performance.now() - pending.started;
    this.#pending = pending;
    return this.#settings.background ? null : this.#native.stats().generation;
  }

  /** Why building the arena failed, once it did (the switch is then given up), else null. */
  failure(): string | null {
    const why = this.#pending?.error ?? null;
    if (why !== null) this.#pending = null;
    return why;
  }

  /** The switch under way now serves, as `generation`, from the iteration after `iteration`. */
  installed(generation: number, iteration: number): { event: PlanSwitch; purpose: Purpose } {
    const pending = this.#pending!;
    this.#pending = null;
    const event: PlanSwitch = {
      generation,
      iteration,
      waitedIterations: iteration - pending.iteration,
      background: this.#settings.background,
      reason: pending.purpose.reason,
      trigger: pending.purpose.trigger,
      plan: pending.plan,
      trace: pending.trace,
      trainMs: pending.trainMs,
      trainedOn: pending.trainedOn,
      switchMs: pending.switchMs,
      readyMs: performance.now() - pending.started,
    };
    this.#switches++;
    if (event.reason === 'drift') this.#replans++;
    this.#lastSwitch = event;
    const { plan: _plan, trace: _trace, ...summary } = event;
    this.#history.push(summary);
    if (this.#history.length > HISTORY) this.#history.shift();
    return { event, purpose: pending.purpose };
  }

  /** The pool closed: training under way stops (a switch being built is dropped by the native pool). Whether one was. */
  cancel(): boolean {
    if (!this.#training) return false;
    this.#training.job.cancel();
    this.#training = null;
    return true;
  }
}

/** The plan with more said about how it was trained. */
function withTraining(plan: Plan, purpose: Purpose): Plan {
  const training = { adaptive: true, reason: purpose.reason, patterns: purpose.patterns.length };
  return new Plan(plan, { lowerBound: plan.lowerBound, source: plan.source, training: { ...plan.training, ...training } });
}

/**
 * Adaptive mode: the pool records a window of its latest iterations, trains a plan from them as soon as an
 * input shape has repeated, switches to it without a restart, and follows the workload from there: a new
 * shape, or a plan that no longer fits, trains a plan on the window again (the shapes seen lately, the new
 * one included), and a plan whose shapes have gone from the window is replaced by a smaller one. The native
 * pool records (native/core/recorder.h), sums each iteration up at markIteration() and switches arenas
 * (Pool::switchPlan, or Pool::prepareSwitch off the JS thread, installed by the next markIteration()); a
 * switch gives the retired arena's free pages back to the OS. The policy is in four parts, composed here:
 *   adaptive/options.ts   the options, checked (checkAdaptiveOptions)
 *   adaptive/window.ts    the window of recorded iterations, and what "the same pattern" is
 *   adaptive/judge.ts     whether the workload needs a new plan or a smaller one, and whether a plan
 *                         trained for it is worth switching to
 *   adaptive/switcher.ts  training (lib/process/background-training.ts on a worker), building the arena,
 *                         the switches made
 * One Adaptation belongs to one Pool and runs on its thread. The process pool runs it under
 * `tensorpool run --adaptive` (TENSORPOOL_ADAPTIVE=1), not by default.
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
 *   planned    the window goes on recording (its latest `recordLimit` iterations); the judge watches each
 *              iteration and, when the workload needs a new or smaller plan, one is trained on the window →
 *              training.
 *   training   the plan is trained on a worker thread while the serving classes go on serving; the first
 *              markIteration() after it finished takes the plan → switching.
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
 */
import type { NativeControlledPool, NativeIterationSummary } from '../native.js';
import type { Plan } from '../plan/plan.js';
import { type Purpose, Judge, purposeOf } from './adaptive/judge.js';
import type { Settings } from './adaptive/options.js';
import { type PlanSwitch, type Training, Switcher } from './adaptive/switcher.js';
import { IterationWindow } from './adaptive/window.js';

export type { IterationReport } from './adaptive/judge.js';
export { type AdaptiveOptions, checkAdaptiveOptions } from './adaptive/options.js';
export type { PlanSwitch } from './adaptive/switcher.js';

/**
 * Where adaptive mode stands: warming up, recording a window, training, switching to the plan, serving it
 * ('planned'), or given up on a plan ('unplanned').
 */
export type AdaptiveMode = 'warm-up' | 'recording' | 'training' | 'switching' | 'planned' | 'unplanned';

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

export class Adaptation {
  readonly #settings: Settings;
  readonly #native: NativeControlledPool;
  readonly #window: IterationWindow;
  readonly #judge: Judge;
  readonly #switcher: Switcher;
  #mode: AdaptiveMode;
  #plan: Plan | null;
  #iteration = 0;
  #abandoned = 0;
  #lastError: string | null = null;

  /** `plan`: the pool's starting plan, if it was given one (the pool starts planned, after the warm-up). */
  constructor(nativePool: NativeControlledPool, settings: Settings, plan: Plan | null) {
    this.#settings = settings;
    this.#native = nativePool;
    this.#window = new IterationWindow(nativePool, settings);
    this.#judge = new Judge(settings, plan !== null);
    this.#switcher = new Switcher(nativePool, settings);
    this.#plan = plan;
    this.#mode = settings.warmupIterations > 0 ? 'warm-up' : plan ? 'planned' : 'recording';
    if (this.#mode !== 'warm-up') this.#window.start(0);
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
  whenReady(): Promise<void> {
    return this.#switcher.whenReady();
  }

  /** Called by Pool.markIteration() with what the iteration that ended asked for. */
  step(s: NativeIterationSummary): PlanSwitch | null {
    if (s.allocs > 0) this.#iteration++;
    const { carried, restarted } = this.#window.mark(s);
    if (restarted !== null) this.#lastError = restarted;
    if (s.installed && this.#switcher.building) return this.#switched(s.installed);
    if (s.allocs === 0) return null;
    switch (this.#mode) {
      case 'warm-up':
        if (this.#iteration >= this.#settings.warmupIterations) {
          this.#window.start(s.recorderEnd);
          this.#mode = this.#plan ? 'planned' : 'recording';
        }
        return null;
      case 'recording':
        return this.#window.learnt() ? this.#train(purposeOf('warm-up', null, this.#window)) : null;
      case 'unplanned':
        if (!this.#judge.retryDue() || this.#window.length === 0) return null;
        return this.#train(purposeOf('warm-up', null, this.#window));
      case 'planned': {
        const purpose = this.#judge.watch(s, this.#iteration, carried, this.#window);
        return purpose ? this.#train(purpose) : null;
      }
      case 'training': {
        const trained = this.#switcher.collect();
        return trained ? this.#switchTo(trained) : null;
      }
      case 'switching': {
        const why = this.#switcher.failure();
        if (why !== null) this.#abandon(`the switch failed: ${why}`);
        return null;
      }
    }
  }

  stats(): AdaptiveStats {
    const state = this.#native.recordingState();
    const ready = (this.#mode === 'training' || this.#mode === 'switching') && this.#switcher.ready;
    return {
      mode: this.#mode,
      iteration: this.#iteration,
      switches: this.#switcher.switches,
      replans: this.#switcher.replans,
      abandoned: this.#abandoned,
      driftStreak: this.#judge.driftStreak,
      recordedEvents: state.end - state.begin,
      patterns: this.#judge.patterns,
      lastSwitch: this.#switcher.lastSwitch,
      history: this.#switcher.history,
      lastError: this.#lastError,
      ready,
    };
  }

  /** The pool closed: training under way stops (a switch being built is dropped by the native pool). */
  close(): void {
    if (this.#switcher.cancel()) this.#abandon('the pool closed while the plan was trained');
  }

  /** Trains a plan for `purpose` on the window: on a worker (→ training), or here, switching at once. */
  #train(purpose: Purpose): PlanSwitch | null {
    const { recording, name } = this.#window.copy(this.#iteration);
    const trained = this.#switcher.train(recording, name, purpose, this.#iteration);
    if (trained) return this.#switchTo(trained);
    this.#mode = 'training';
    return null;
  }

  /** Switches to the plan trained, if the judge finds it worth it: in the background (→ switching) or at once. */
  #switchTo(trained: Training): PlanSwitch | null {
    if ('error' in trained) {
      this.#abandon(`training failed: ${trained.error}`);
      return null;
    }
    switch (this.#judge.verdict(trained.plan, trained.purpose, this.#plan)) {
      case 'keep':
        this.#mode = 'planned';
        return null;
      case 'same':
        this.#abandon('the re-trained plan is the serving plan: re-planning cannot help');
        return null;
      case 'switch':
        break;
    }
    const generation = this.#switcher.switchTo(trained);
    if (generation === null) {
      this.#mode = 'switching';
      return null;
    }
    if (typeof generation === 'object') {
      this.#abandon(`the switch failed: ${generation.error}`);
      return null;
    }
    return this.#switched(generation);
  }

  /** The switch under way now serves, as `generation`. */
  #switched(generation: number): PlanSwitch {
    const { event, purpose } = this.#switcher.installed(generation, this.#iteration);
    this.#judge.switched(purpose, this.#iteration);
    this.#plan = event.plan;
    this.#lastError = null;
    this.#mode = 'planned';
    return event;
  }

  #abandon(why: string): void {
    this.#lastError = why;
    this.#abandoned++;
    this.#judge.abandoned();
    this.#mode = this.#plan ? 'planned' : 'unplanned';
  }
}

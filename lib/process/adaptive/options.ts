/**
 * Adaptive mode's options (PoolOptions.adaptive): what each means and its default, and checkAdaptiveOptions(),
 * which turns what a program passed into the Settings the other parts read (a bad value throws
 * ERR_TP_INVALID_ARGUMENT naming the option).
 */
import { DEFAULT_RECORD_EVENTS } from '../../plan/recording.js';
import type { TrainOptions } from '../../plan/train.js';
import { checkBoolean, checkFunction, checkInteger, checkOptions, describe, invalidArgument } from '../../validate.js';
import type { PlanSwitch } from './switcher.js';

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

/** The options checked, every default filled in. */
export type Settings = Required<Omit<AdaptiveOptions, 'onSwitch' | 'train'>> & Pick<AdaptiveOptions, 'onSwitch' | 'train'>;

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

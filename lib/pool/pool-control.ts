/**
 * What every pool handle in JS does the same way over its native pool: the plan serving now, iteration
 * marks (with adaptive mode judging them), recording, and statistics. Pool (a pool of this process's own)
 * and ProcessPool (the preload library's) each hold one.
 */
import { Adaptation, type AdaptiveStats } from '../process/adaptive.js';
import { TensorPoolError } from '../errors.js';
import type { NativeControlledPool, PoolCounters } from '../native.js';
import type { PlanSpec } from '../plan/plan-spec.js';
import { DEFAULT_RECORD_EVENTS, traceFromRecording } from '../plan/recording.js';
import type { Trace } from '../trace/trace.js';
import { checkInteger, checkOptions } from '../validate.js';

/** One size class of a pool: its block size, its blocks, and how they were used. */
export interface ClassStats {
  /** Bytes per block. */
  size: number;
  /** Blocks of this class (planned + grown). */
  blocks: number;
  /** Blocks not live now: on the free list, or released into the pool's front cache (`cached` of them). */
  free: number;
  /** Of the free blocks, those the front cache holds for its next request of their byte length. */
  cached: number;
  /** Requests served from their own class. */
  hits: number;
  /** Requests of smaller classes this class served (S0's borrows). */
  lent: number;
  /** Blocks carved on demand after creation. */
  grown: number;
  /**
   * Time-shared plans: requests that found this class's free blocks (or their scheduled block) unusable
   * because a block sharing their memory was live, and were served elsewhere.
   */
  busy: number;
}

/** The counters a pool and the process pool share (Pool.stats() adds the front cache's). */
export interface PoolStats extends PoolCounters {
  /** The serving classes' interval (0 for the default classes). */
  interval: number;
  classes: ClassStats[];
  /** Σ classes[].busy: how often a block was skipped because its memory was in use (time-shared plans). */
  busySkips: number;
  /** Adaptive mode: its mode, switches and what triggered them; null for other pools. */
  adaptive: AdaptiveStats | null;
  /** The pool's own recording (record()): whether it runs, events held, and whether it hit its limit. */
  recording: { on: boolean; events: number; truncated: boolean };
}

export class PoolControl {
  readonly #native: NativeControlledPool;
  readonly #initialPlan: PlanSpec | null;
  readonly adaptation: Adaptation | null;
  #recordingFrom: number | null = null; // record(): the number of its first event
  #keepEvents = false; // the recording belongs to someone else too: stopRecording() leaves its events held

  /**
   * `recordingSince`: a recording already under way from that event on, not started by record() (the process
   * pool under TENSORPOOL_RECORD, which writes its events at exit): stopRecording() returns it and leaves the
   * events held for the library.
   */
  constructor(nativePool: NativeControlledPool, initialPlan: PlanSpec | null, adaptation: Adaptation | null, recordingSince: number | null = null) {
    this.#native = nativePool;
    this.#initialPlan = initialPlan;
    this.adaptation = adaptation;
    this.#recordingFrom = recordingSince;
    this.#keepEvents = recordingSince !== null;
  }

  get plan(): PlanSpec | null {
    return this.adaptation?.plan ?? this.#initialPlan;
  }

  markIteration(): void {
    if (this.adaptation === null) {
      this.#native.markIteration(false);
      return;
    }
    const switched = this.adaptation.step(this.#native.markIteration());
    if (switched) this.adaptation.onSwitch?.(switched);
  }

  /** Settles once adaptive mode's background work is done (Adaptation.whenReady); at once without adaptive mode. */
  adaptiveReady(): Promise<void> {
    return this.adaptation?.whenReady() ?? Promise.resolve();
  }

  record(options: unknown): void {
    const o = checkOptions<{ maxEvents?: number }>(options, 'options', ['maxEvents']);
    const maxEvents = o.maxEvents === undefined ? DEFAULT_RECORD_EVENTS : checkInteger(o.maxEvents, 'options.maxEvents', 1, 2 ** 40);
    if (this.adaptation) throw new TensorPoolError('ERR_TP_UNSUPPORTED', 'an adaptive pool records on its own: see stats().adaptive.lastSwitch.trace');
    if (this.#recordingFrom !== null) throw new TensorPoolError('ERR_TP_UNSUPPORTED', 'the pool is already recording');
    const state = this.#native.recordingState();
    this.#native.discardRecording(state.end);
    this.#recordingFrom = state.end;
    this.#native.startRecording(maxEvents);
  }

  stopRecording(name: string): Trace {
    if (this.#recordingFrom === null) throw new TensorPoolError('ERR_TP_UNSUPPORTED', 'the pool is not recording: call record() first');
    this.#native.stopRecording();
    const trace = traceFromRecording(this.#native.copyRecording(this.#recordingFrom), name);
    if (!this.#keepEvents) this.#native.discardRecording(Number.MAX_SAFE_INTEGER);
    this.#recordingFrom = null;
    this.#keepEvents = false;
    return trace;
  }

  stats(): PoolStats {
    const s = this.#native.stats();
    const c = this.#native.classStats();
    const classes: ClassStats[] = [];
    for (let i = 0; i < c.size.length; i++) {
      classes.push({ size: c.size[i], blocks: c.blocks[i], free: c.free[i], cached: c.cached[i], hits: c.hits[i], lent: c.lent[i], grown: c.grown[i], busy: c.busy[i] });
    }
    const recording = this.#native.recordingState();
    return {
      ...s,
      interval: c.interval,
      classes,
      busySkips: classes.reduce((n, k) => n + k.busy, 0),
      adaptive: this.adaptation?.stats() ?? null,
      recording: {
        on: recording.on && this.#recordingFrom !== null,
        events: this.#recordingFrom === null ? 0 : recording.end - recording.begin,
        truncated: this.#recordingFrom !== null && recording.truncated,
      },
    };
  }
}

/** Messages between a replay and its workers (one child process per allocator). */
import type { NativeRepetition, TouchMode } from '../native.js';

export interface WorkerInit {
  type: 'init';
  tracePath: string;
  allocator: 'pool' | 'pool-js' | 'offsets' | 'libc' | 'preload' | 'ideal';
  /** The size-class plan (pool, pool-js) or the offset plan (offsets, ideal). */
  planPath?: string;
  touch: TouchMode;
  iterationMarks: boolean;
  /** A library name that must appear in /proc/self/maps (the preloaded allocator), checked at start. */
  mapsName?: string;
}

export interface WorkerRun {
  type: 'run';
  /** Time every operation in this repetition (for the alloc / release split). */
  timeOperations: boolean;
}

export interface WorkerFinish {
  type: 'finish';
}

export type ToWorker = WorkerInit | WorkerRun | WorkerFinish;

/** One repetition as the native replayer measured it; `timed`: every operation was timed. */
export interface RepetitionRecord extends NativeRepetition {
  timed: boolean;
}

/**
 * How a tensorpool allocator's requests were served in a replay (the pool's counters; AllocatorResult.pool
 * gives them per repetition).
 */
export interface PoolCounters {
  hits: number;
  borrows: number;
  osFallbacks: number;
  osOversize: number;
  scheduleHits: number;
  scheduleMisses: number;
  /** Time-shared plans: requests whose block was skipped because its memory was in use. */
  busySkips: number;
  offsetHits: number;
  offsetMisses: number;
  arenaBytes: number;
  /** Iterations marked (the trace's own and each repetition's start, where the replay marks them). */
  iterations: number;
  /** tensorpool-preload: the process pool's threshold; smaller requests went to the C library's malloc. */
  minBytes?: number;
}

export type FromWorker =
  | { type: 'ready'; faultSource: 'perf_event' | 'getrusage' }
  | { type: 'repetition'; record: RepetitionRecord }
  | { type: 'finished'; peakRssBytes: number; rssStartBytes: number; pool?: PoolCounters }
  | { type: 'error'; message: string };

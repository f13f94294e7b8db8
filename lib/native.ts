/**
 * Loads the compiled addon (build/Release when built here, else a prebuild from prebuilds/) and describes what
 * it exports.
 * Only lib/ talks to these shapes; users see the typed classes built on them.
 */
import path from 'node:path';

import { TensorPoolError } from './errors.js';

/** The process's memory (memoryUsage()), in bytes. */
export interface MemoryUsage {
  /** Resident set size now. */
  rss: number;
  /** Its high-water mark since start. */
  peakRss: number;
  /** The C library's heap (every arena): bytes in blocks handed out, its own mapped ones included. 0 where the C library cannot say (not glibc >= 2.33). */
  cHeapInUse: number;
  /** Bytes the C library's heap holds free: memory freed by the program that it has not given back to the OS. */
  cHeapFree: number;
}

/** A TENSORPOOL_* variable the preload library reads (native/preload/options.h). */
export interface PreloadOption {
  name: string;
  /** The `tensorpool run` option that sets it, or null. */
  flag: string | null;
  /** threshold: bytes from the pool's floor (64K) up. */
  kind: 'bytes' | 'count' | 'threshold' | 'milliseconds' | 'switch' | 'path';
  /** The default as text, or null: unset. */
  fallback: string | null;
  help: string;
}

/** How a replay touches each allocation (replay()'s `touch` option). */
export type TouchMode = 'pages' | 'full' | 'none' | 'verify';

export interface NativeFaultCounts {
  minor: number;
  major: number;
}

/** The pool's counters, as the core keeps them (native/core/pool.h); PoolStats (pool/pool.ts) adds the classes. */
export interface PoolCounters {
  /** Allocations served, by any route. */
  allocs: number;
  /** Blocks returned by release(). */
  releases: number;
  /** Blocks returned by the finalizer because their buffer was dropped without release() (a leak caught). */
  finalized: number;
  /** Served from the request's own class. */
  hits: number;
  /** Served by a block of a larger class. */
  borrows: number;
  /** Served by a block carved on demand. */
  grown: number;
  /** Served by the OS because no class had a free block. */
  osFallbacks: number;
  /** Served by the OS because the request is larger than every class. */
  osOversize: number;
  liveBlocks: number;
  /** Bytes requested by live blocks. */
  bytesLive: number;
  peakBytesLive: number;
  osLiveBlocks: number;
  osLiveBytes: number;
  /** Bytes carved from the arenas (blocks and their 64-byte headers). */
  arenaBytes: number;
  /** Address space the arenas hold. */
  reservedBytes: number;
  /** Bytes the arenas pre-faulted or locked (a prepared arena not serving yet included, as in reservedBytes). */
  committedBytes: number;
  /** Arenas mapped: the serving one, plus any older one still draining. */
  arenas: number;
  /** Borrows the plan's schedule did not call for: the run departed from what the plan was trained on. */
  unplannedBorrows: number;
  /** markIteration() calls. */
  iterations: number;
  /** Which classes serve: 1 at creation, larger at every plan switch (adaptive mode). */
  generation: number;
  /** Plan switches so far. */
  switches: number;
  /** A plan's arena built in the background, installed by the next markIteration(); 0 when none waits. */
  preparedGeneration: number;
  /** Allocations served from the class the plan's schedule gave their position. */
  scheduleHits: number;
  /** Scheduled positions where the run departed (another size) or the scheduled class had no free block. */
  scheduleMisses: number;
  /** Offsets mode: allocations served at their planned offset, and planned positions that could not be. */
  offsetHits: number;
  offsetMisses: number;
  /** S4's event pool: events made because it was empty, and events taken from it. */
  eventsCreated: number;
  eventsReused: number;
  /** Blocks released with a stream, waiting for it to pass their events (and their bytes). */
  deferredPending: number;
  deferredBytes: number;
  /** Blocks a front cache holds (released by their owners, kept to be handed out again), and their capacity. */
  cachedBlocks: number;
  cachedBytes: number;
  /** Front-cache log entries that named no block in the right state, ignored (0 unless something is wrong). */
  cacheRejected: number;
  closed: boolean;
  /** Decay: free blocks whose pages went back to the OS after sitting idle (the process pool), and their capacity. */
  purgedBlocks: number;
  purgedBytes: number;
  /** Decay: of the bytes given back, those handed out again (their pages faulted in anew), summed as each decay epoch ends. */
  rewarmedBytes: number;
}

/** What markIteration() reports about the iteration that ended (native/core/pool.h IterationSummary). */
export interface NativeIterationSummary {
  allocs: number;
  bytes: number;
  sizeHash: number;
  osFallbacks: number;
  osOversize: number;
  unplannedBorrows: number;
  /** Served by a block carved for it (a growing pool's departure from its plan; lent ones are unplannedBorrows too). */
  grown: number;
  /** Blocks live at the mark: carried into the next iteration. */
  liveBlocks: number;
  recorderEnd: number;
  /** The generation a prepared switch installed at this mark (serving from now on), or 0. */
  installed: number;
}

/** Recorded events (native/core/recorder.h): op 0 alloc (value: bytes), 1 release (value: stream number or 0), 2 mark. */
export interface NativeRecording {
  ops: Uint8Array;
  serials: Float64Array;
  /** Bytes of an allocation, stream number (or 0) of a release. */
  values: Float64Array;
  /** The allocating thread's number (0: the main thread); 0 for other events. */
  threads: Uint16Array;
}

export interface NativeClassStats {
  interval: number;
  size: Float64Array;
  blocks: Float64Array;
  free: Float64Array;
  hits: Float64Array;
  lent: Float64Array;
  grown: Float64Array;
  busy: Float64Array;
  cached: Float64Array;
}

export interface NativePlanSpec {
  interval: number;
  sizes: Float64Array;
  blocks: Float64Array;
  scheduleSizes?: Float64Array;
  scheduleClasses?: Float64Array;
  /** Time-shared plans: per schedule entry its block, per block its class and offset. */
  scheduleBlocks?: Float64Array;
  iterationStarts?: Float64Array;
  cycle?: number;
  layoutClasses?: Float64Array;
  layoutOffsets?: Float64Array;
}

export interface NativePoolOptions {
  offsets?: { height: number; sizes: Float64Array; offsets: Float64Array } | null;
  prefault: boolean;
  hugePages: boolean;
  lock: boolean;
  grow: boolean;
  /** With no plan (the default classes) and `grow`: large requests served from spans, as the process pool serves them. */
  spans?: boolean;
  growReserve: number;
  osMapThreshold: number;
  /** The front cache's log capacity in entries; 0 or absent: no front cache. */
  frontCacheEntries?: number;
}

/** What NativePool.release answers (native/napi/pool_object.h). */
export const ReleaseCode = { Released: 0, NotOwned: 1, NotLive: 2, Detached: 3 } as const;
export type ReleaseCode = (typeof ReleaseCode)[keyof typeof ReleaseCode];

/** What a pool's control needs: counters, marks, recording and plan switches (NativePool, NativeProcessPool). */
export interface NativeControlledPool {
  stats(): PoolCounters;
  classStats(): NativeClassStats;
  /** The summary of the iteration that ended; with `false`, undefined (none is built). */
  markIteration(): NativeIterationSummary;
  markIteration(wantSummary: false): undefined;
  switchPlan(plan: NativePlanSpec): void;
  /** Builds the plan's arena off the JS thread; resolves (to its generation) once the next markIteration() will install it. */
  prepareSwitch(plan: NativePlanSpec): Promise<number>;
  startRecording(limit: number): void;
  stopRecording(): void;
  recordingState(): { on: boolean; truncated: boolean; begin: number; end: number };
  copyRecording(from: number): NativeRecording;
  discardRecording(before: number): void;
}

export interface NativePool extends NativeControlledPool {
  /** A pool without a front cache. */
  alloc(bytes: number): ArrayBuffer;
  /**
   * With a front cache: undefined when the pool served an address and length of which the cache holds a
   * dormant handle (a release entry of its log), which now stands for this allocation; the log's reply names the address.
   * With `cachedUpTo` (the largest class the cache holds blocks of): null when the block would not come off
   * its class's free list and that class is at most cachedUpTo (the cache gives blocks back first).
   */
  alloc(bytes: number, cachedUpTo?: number): ArrayBuffer | null | undefined;
  /** The front cache's log (native/napi/front_cache_log.h), or null without one. */
  frontCacheLog(): Float64Array | null;
  /** A block the front cache held back to its free list; the buffer is detached. */
  returnCached(buffer: ArrayBuffer): ReleaseCode;
  /** Applies the front cache's log. */
  settle(): void;
  release(buffer: ArrayBuffer, stream?: NativeStream): ReleaseCode;
  /** The front cache dropped its dormant handle of (address, bytes); with no arguments, all of them. */
  forgetDormant(address?: number, bytes?: number): void;
  reclaim(): number;
  setEventPooling(pooling: boolean): void;
  close(): void;
  /** The number another environment of this process attaches with (`new NativePool(id, ...)`). */
  share(): number;
}

/** The preload library's process pool (native/napi/process_pool_object.cc). */
export interface NativeProcessPool extends NativeControlledPool {
  /** malloc_trim's share of the pool: the pages of its free blocks and spans go back now; returns the bytes. */
  trim(): number;
}

/** The preload library's process pool, as the addon describes it (native/napi/process_pool_object.h). */
export interface NativeProcessPoolInfo {
  mode: 'default' | 'planned' | 'recording' | 'adaptive';
  minBytes: number;
  build: string;
  planPath: string | null;
  recordPath: string | null;
}

export interface NativeFaultMeter {
  read(): NativeFaultCounts;
  readonly source: 'perf_event' | 'getrusage';
}

export interface NativeRepetition {
  ns: number;
  allocNs: number;
  releaseNs: number;
  allocs: number;
  releases: number;
  minorFaults: number;
  majorFaults: number;
  /** touch 'verify': blocks whose stamps had changed by their release. */
  corruptions: number;
}

export interface NativeReplayer {
  run(timeOperations: boolean): NativeRepetition;
  /** run() on a libuv thread; until it settles every other call throws ERR_TP_BUSY. */
  runAsync(timeOperations: boolean): Promise<NativeRepetition>;
  /** Runs the events from where the last step stopped up to `to`, leaving their blocks live. */
  runUntil(to: number, timeOperations: boolean): NativeRepetition;
  /** Releases what runUntil left live and starts over. */
  rewind(timeOperations: boolean): NativeRepetition;
  readonly faultSource: 'perf_event' | 'getrusage';
}

export interface NativePlanningProblem {
  sizes: Float64Array;
  lower?: Float64Array;
  upper?: Float64Array;
  neighbourStarts?: Float64Array;
  neighbours?: Float64Array;
}

export interface NativeStream {
  fill(buffer: ArrayBuffer, byteOffset: number, byteLength: number, patternLow: number, patternHigh: number, patternBytes: number): number;
  copy(dst: ArrayBuffer, dstOffset: number, src: ArrayBuffer, srcOffset: number, bytes: number): number;
  axpy(a: number, x: ArrayBuffer, xOffset: number, y: ArrayBuffer, yOffset: number, count: number): number;
  waitGate(): [number, number];
  openGate(gate: number): void;
  recorded(): number;
  completed(): number;
  watch(sequence: number): void;
  close(cancel: boolean): void;
}

export interface NativeAddon {
  NativeStream: new (onProgress: (completed: number) => void) => NativeStream;
  planOffsets(
    problem: NativePlanningProblem,
    options: { strategy: string; timeLimitMs: number; seed: number },
  ): {
    offsets: Float64Array;
    peak: number;
    lowerBound: number;
    lowerBoundExact: boolean;
    optimal: boolean;
    ms: number;
    notes: string;
    order: Uint32Array;
    valid: boolean;
    why: string;
  };
  verifyOffsets(problem: NativePlanningProblem, offsets: Float64Array): { valid: boolean; why: string };
  NativeReplayer: new (
    allocator: NativePool | 'libc' | { ideal: { height: number; sizes: Float64Array; offsets: Float64Array } },
    ops: Uint8Array,
    buffers: Int32Array,
    sizes: Float64Array,
    options: { touch: TouchMode; iterationMarks: boolean; unmarked?: boolean },
  ) => NativeReplayer;
  NativePool: {
    new (plan: NativePlanSpec | null, options: NativePoolOptions): NativePool;
    /** Another handle on the pool shared as `id`: ERR_TP_NOT_SHARED when there is none, ERR_TP_CLOSED when it is closed. */
    new (id: number, options: { frontCacheEntries?: number }): NativePool;
  };
  /** Throws ERR_TP_NO_PROCESS_POOL without the preload library, ERR_TP_PRELOAD_MISMATCH for another build's. */
  NativeProcessPool: new () => NativeProcessPool;
  /** The preload library's process pool, or null when this process does not preload it. */
  processPoolInfo(): NativeProcessPoolInfo | null;
  /** The calling thread's allocations go to the C library from now on, not to the preloaded process pool;
   *  false (nothing done) where none is preloaded. */
  leaveProcessPool(): boolean;
  NativeFaultMeter: new () => NativeFaultMeter;
  processFaults(): NativeFaultCounts;
  /** With `true`, resets the peak to the current RSS first. */
  memory(resetPeak?: boolean): MemoryUsage;
  bufferAddress(buffer: ArrayBuffer): number;
  /** Detaches `buffer`, so that V8 frees its memory now if no other handle shares it; false if it cannot be detached. */
  freeBuffer(buffer: ArrayBuffer): boolean;
  /** Lends `pool` to the ONNX Runtime loaded from `libraryPath`; its version. Throws ERR_TP_ONNXRUNTIME. */
  registerOrtAllocator(libraryPath: string, pool: NativePool): string;
  unregisterOrtAllocator(): void;
  ortAllocatorCounters(): { allocs: number; frees: number; heapFallbacks: number };
  trainSizeClasses(
    sizes: Float64Array,
    starts: Float64Array,
    ends: Float64Array,
    intervals: Float64Array,
    order: 'alloc-time' | 'size-desc',
    refine: boolean,
  ): {
    sizes: Float64Array;
    blocks: Float64Array;
    borrows: number;
    classOf: Uint32Array;
    ms: number;
    /** Refinement ran (native/train/refine.h); then literalSizes / literalBlocks are S0's own classes. */
    refined: boolean;
    literalSizes?: Float64Array;
    literalBlocks?: Float64Array;
  }[];
  /** One time-shared plan per interval (native/train/share.h), or null where the layout failed. */
  trainTimeShared(
    sizes: Float64Array,
    starts: Float64Array,
    ends: Float64Array,
    intervals: Float64Array,
    /** With > 0: the planners' best search gets this long when greedy by size ends above the bound. */
    searchMs: number,
    /** Pairs of tensors to keep apart beside those whose lifetimes overlap (wrapAroundConflicts). */
    extraConflicts?: Float64Array,
    /** > 0: the layout gives up (null) when greedy by size has not placed every tensor by then. */
    layoutMs?: number,
  ): ({
    sizes: Float64Array;
    blocks: Float64Array;
    classOf: Uint32Array;
    blockOf: Uint32Array;
    blockClass: Uint32Array;
    blockOffset: Float64Array;
    arenaBytes: number;
    ms: number;
  } | null)[];
  /**
   * Replaces this process with the program at `path` (execve; `argv[0]` first), in `env` ("NAME=value" each),
   * every signal's action the default and the mask empty (native/os/exec.h). Returns only on failure: the
   * errno, with the actions and the mask as they were.
   */
  execProgram(path: string, argv: string[], env: string[]): number;
  /** The preload library's options table (native/preload/options.h), in its order. */
  preloadOptions(): PreloadOption[];
  /** null when the preload library takes `text` for option `name`, else the line it would print. */
  checkPreloadOption(name: string, text: string): string | null;
  pageSize: number;
}

// The package root: one level up from lib/ (sources, under vitest) and from dist/ (compiled).
export const packageRoot = path.join(__dirname, '..');

// eslint-disable-next-line @typescript-eslint/no-require-imports
const loadBinding: (dir: string) => unknown = require('node-gyp-build');

/**
 * The addon, or where it cannot be loaded (a clone not built yet, a platform without a prebuild) an object whose
 * every use throws ERR_TP_NO_ADDON, saying why in one line: importing tensorpool still works, and the CLI
 * answers with that line instead of a stack trace. TENSORPOOL_ADDON names a specific build to load instead (the
 * sanitizer run uses an ASan build).
 */
function loadAddon(): NativeAddon {
  try {
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- a path known only at run time
    return (process.env.TENSORPOOL_ADDON ? require(process.env.TENSORPOOL_ADDON) : loadBinding(packageRoot)) as NativeAddon;
  } catch (error) {
    const reason = String((error as Error)?.message ?? error).split('\n')[0];
    const missing = new TensorPoolError(
      'ERR_TP_NO_ADDON',
      `the native addon could not be loaded (${reason}): from a clone, build it with npm run build:addon; the npm package ships prebuilds for Linux x64 (glibc) only`,
    );
    return new Proxy({} as NativeAddon, {
      get() {
        throw missing;
      },
    });
  }
}

export const native = loadAddon();

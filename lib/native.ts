/**
 * Loads the compiled addon (a prebuild from prebuilds/, else build/Release) and describes what it exports.
 * Only lib/ talks to these shapes; users see the typed classes built on them.
 */
import path from 'node:path';

export interface NativeFaultCounts {
  minor: number;
  major: number;
}

export interface NativeStats {
  allocs: number;
  releases: number;
  finalized: number;
  hits: number;
  borrows: number;
  grown: number;
  osFallbacks: number;
  osOversize: number;
  liveBlocks: number;
  bytesLive: number;
  peakBytesLive: number;
  osLiveBlocks: number;
  osLiveBytes: number;
  arenaBytes: number;
  reservedBytes: number;
  committedBytes: number;
  arenas: number;
  iterations: number;
  scheduleHits: number;
  scheduleMisses: number;
  offsetHits: number;
  offsetMisses: number;
  eventsCreated: number;
  eventsReused: number;
  deferredPending: number;
  deferredBytes: number;
  closed: boolean;
}

export interface NativeClassStats {
  interval: number;
  size: Float64Array;
  blocks: Float64Array;
  free: Float64Array;
  hits: Float64Array;
  lent: Float64Array;
  grown: Float64Array;
}

export interface NativePlanSpec {
  interval: number;
  sizes: Float64Array;
  blocks: Float64Array;
  scheduleSizes?: Float64Array;
  scheduleClasses?: Float64Array;
}

export interface NativePoolOptions {
  offsets?: { height: number; sizes: Float64Array; offsets: Float64Array } | null;
  prefault: boolean;
  hugePages: boolean;
  lock: boolean;
  grow: boolean;
  growReserve: number;
  osMapThreshold: number;
}

/** What NativePool.release answers (native/napi/pool_object.h). */
export const ReleaseCode = { Released: 0, NotOwned: 1, NotLive: 2, Detached: 3 } as const;
export type ReleaseCode = (typeof ReleaseCode)[keyof typeof ReleaseCode];

export interface NativePool {
  alloc(bytes: number): ArrayBuffer;
  release(buffer: ArrayBuffer, stream?: NativeStream): ReleaseCode;
  reclaim(): number;
  setEventPooling(pooling: boolean): void;
  stats(): NativeStats;
  classStats(): NativeClassStats;
  close(): void;
  beginIteration(): void;
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
}

export interface NativeReplayer {
  run(timeOperations: boolean): NativeRepetition;
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
    allocator: NativePool | 'libc',
    ops: Uint8Array,
    buffers: Int32Array,
    sizes: Float64Array,
    options: { touch: 'none' | 'pages' | 'full'; iterationMarks: boolean },
  ) => NativeReplayer;
  NativePool: new (plan: NativePlanSpec | null, options: NativePoolOptions) => NativePool;
  NativeFaultMeter: new () => NativeFaultMeter;
  processFaults(): NativeFaultCounts;
  /** With `true`, resets the peak to the current RSS first. */
  memory(resetPeak?: boolean): { rss: number; peakRss: number };
  bufferAddress(buffer: ArrayBuffer): number;
  trainSizeClasses(
    sizes: Float64Array,
    starts: Float64Array,
    ends: Float64Array,
    intervals: Float64Array,
    order: 'alloc-time' | 'size-desc',
  ): { sizes: Float64Array; blocks: Float64Array; borrows: number; classOf: Uint32Array; ms: number }[];
  pageSize: number;
}

// The package root: one level up from lib/ (sources, under vitest) and from dist/ (compiled).
export const packageRoot = path.join(__dirname, '..');

// eslint-disable-next-line @typescript-eslint/no-require-imports
const loadBinding: (dir: string) => unknown = require('node-gyp-build');

// TENSORPOOL_ADDON names a specific build to load instead (the sanitizer run uses an ASan build).
export const native = (process.env.TENSORPOOL_ADDON ? require(process.env.TENSORPOOL_ADDON) : loadBinding(packageRoot)) as NativeAddon;

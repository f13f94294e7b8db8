/**
 * The process pool. In a process started under the preload library (`tensorpool run -- <command>`, or
 * LD_PRELOAD set to `preloadLibrary`), the whole process's malloc family — V8's ArrayBuffer backing
 * stores, a native runtime's tensors — serves every request of at least `minBytes` from one pool
 * (native/preload). processPool() is the JS handle on it: its counters, iteration marks, recording, the
 * plan serving, and adaptive mode (`tensorpool run --adaptive`, TENSORPOOL_ADAPTIVE=1; not the default), which
 * records, trains and switches at the marks.
 * The pool itself belongs to the library; this handle never makes a second one.
 */
import fs from 'node:fs';
import path from 'node:path';
import { Buffer } from 'node:buffer';

import { Adaptation, checkAdaptiveOptions, type PlanSwitch } from './adaptive.js';
import { TensorPoolError, fromNative } from '../errors.js';
import { native, packageRoot, type NativeProcessPool, type NativeProcessPoolInfo } from '../native.js';
import { Plan } from '../plan/plan.js';
import type { PlanSpec } from '../plan/plan-spec.js';
import { PoolControl, type PoolStats } from '../pool/pool-control.js';
import type { Trace } from '../trace/trace.js';
import { MAX_ALLOC_BYTES } from '../pool/pool.js';
import { checkFunction, checkInteger, describe, invalidArgument } from '../validate.js';

/** The preload library's file: this package's build when it was compiled here, else its prebuild. */
export const preloadLibrary: string = [
  path.join(packageRoot, 'build/Release/tensorpool-preload.so'),
  path.join(packageRoot, 'prebuilds', `${process.platform}-${process.arch}`, 'tensorpool-preload.so'),
].find((file) => fs.existsSync(file)) ?? path.join(packageRoot, 'build/Release/tensorpool-preload.so');

/**
 * How the process pool serves: 'default' (the default classes, growing), 'planned' (TENSORPOOL_PLAN),
 * 'recording' (TENSORPOOL_RECORD), 'adaptive' (TENSORPOOL_ADAPTIVE=1).
 */
export type ProcessPoolMode = NativeProcessPoolInfo['mode'];

// The process pools whose program called markIteration() itself: tensorpool run's Node hook then stops
// marking its sessions' runs, which would make every iteration two.
const marksItsOwnIterations = new WeakSet<ProcessPool>();

let markingForHook = false;

/** The Node hook's mark (lib/hooks/node.ts): none once the program has marked an iteration itself. */
export function markIterationUnlessMarked(pool: ProcessPool): void {
  if (marksItsOwnIterations.has(pool)) return;
  markingForHook = true;
  try {
    pool.markIteration();
  } finally {
    markingForHook = false;
  }
}

/**
 * The JS handle on the preload library's process pool (processPool() returns it in a process run under
 * `tensorpool run`): its counters, iteration marks, recording, plan and adaptive mode, and ArrayBuffers from
 * the process's malloc.
 */
export class ProcessPool {
  /** 'default' (the default classes, growing), 'adaptive' (TENSORPOOL_ADAPTIVE=1: the default classes until marks
   *  teach it a plan), 'planned' (TENSORPOOL_PLAN), 'recording' (TENSORPOOL_RECORD). */
  readonly mode: ProcessPoolMode;
  /** Requests of at least this many bytes are served by the pool (TENSORPOOL_MIN_BYTES). */
  readonly minBytes: number;
  /** The plan file the pool started from, and the file the recording is written to at exit (or null). */
  readonly planPath: string | null;
  readonly recordPath: string | null;
  readonly #control: PoolControl;
  readonly #handle: NativeProcessPool;
  // The buffers alloc() made that are not released yet, and those released: release() tells a second
  // release from a buffer alloc() never made.
  readonly #buffers = new WeakSet<ArrayBuffer>();
  readonly #released = new WeakSet<ArrayBuffer>();
  #onSwitch: ((event: PlanSwitch) => void) | null = null;

  /** @internal use processPool() */
  constructor(info: NativeProcessPoolInfo) {
    this.mode = info.mode;
    this.minBytes = info.minBytes;
    this.planPath = info.planPath;
    this.recordPath = info.recordPath;
    let handle;
    try {
      handle = new native.NativeProcessPool();
    } catch (error) {
      throw fromNative(error);
    }
    const plan = info.planPath ? Plan.read(info.planPath) : null;
    const adaptation =
      info.mode === 'adaptive' ? new Adaptation(handle, checkAdaptiveOptions({ onSwitch: (e: PlanSwitch) => this.#onSwitch?.(e) }), plan) : null;
    // Under TENSORPOOL_RECORD the library records from the start (and writes the file at exit).
    const recordingSince = info.recordPath !== null && handle.recordingState().on ? handle.recordingState().begin : null;
    this.#control = new PoolControl(handle, plan, adaptation, recordingSince);
    this.#handle = handle;
  }

  /** Called after every switch adaptive mode makes, from the markIteration() that made it. */
  get onSwitch(): ((event: PlanSwitch) => void) | null {
    return this.#onSwitch;
  }
  /** Called after each plan switch of adaptive mode (null: none). */
  set onSwitch(callback: ((event: PlanSwitch) => void) | null) {
    if (callback !== null) checkFunction(callback, 'onSwitch');
    this.#onSwitch = callback;
  }

  /** The plan serving now: the plan file's, or the last one adaptive mode trained; null on the default classes. */
  get plan(): PlanSpec | null {
    return this.#control.plan;
  }

  /**
   * Marks the start of an iteration (an inference run, a training step) for the whole process: the plan's
   * schedule counts allocations from here, and adaptive mode judges the iteration that ended. Without marks
   * a plan's schedule counts from the start of the process, and adaptive mode stays on the default classes.
   */
  markIteration(): void {
    if (!markingForHook) marksItsOwnIterations.add(this);
    this.#control.markIteration();
  }

  /**
   * Adaptive mode (TENSORPOOL_ADAPTIVE): resolves once the plan being trained, or its arena being built, is
   * ready to take over at the next mark (at once where nothing is under way), without blocking the thread, as
   * Pool.adaptiveReady(). A program that waits for it before each mark switches at the same iterations on
   * every run.
   */
  adaptiveReady(): Promise<void> {
    return this.#control.adaptiveReady();
  }

  /**
   * Starts recording what the process pool serves (every thread's allocations; the stream of an allocation
   * is its thread), as Pool.record(). Under TENSORPOOL_RECORD (`tensorpool run --record`) the pool records
   * from the start of the process already, and this throws ERR_TP_UNSUPPORTED.
   */
  record(options?: { maxEvents?: number }): void {
    this.#control.record(options);
  }

  /**
   * Stops recording and returns the trace, as Pool.stopRecording(). Under TENSORPOOL_RECORD it returns the
   * recording since the start of the process, and the file written at exit holds the same events.
   */
  stopRecording(name = 'process'): Trace {
    return this.#control.stopRecording(name);
  }

  /** The process pool's counters now, as Pool.stats() gives a pool's (without a front cache). */
  stats(): PoolStats {
    return this.#control.stats();
  }

  /**
   * Gives the pages of the pool's free memory back to the OS now, as `malloc_trim()` does (the preload
   * library's malloc_trim calls the C library's, then this): every free block of at least 4 pages and every
   * free span, what decay (TENSORPOOL_DECAY_MS) would give back once they sat idle, all of it at once.
   * Live blocks are untouched; a free block handed out again faults in zeroed pages. Counted in stats() as
   * decay's purges are (purgedBlocks, purgedBytes). Returns the bytes given back: 0 where the pool serves a
   * plan (what a plan names stays resident by design) or has nothing free. Takes no arguments (unlike
   * malloc_trim's `pad`): given any, it throws ERR_TP_INVALID_ARGUMENT and gives nothing back.
   */
  trim(): number {
    if (arguments.length !== 0) throw invalidArgument('type', `trim() takes no arguments, got ${arguments.length}`);
    return this.#handle.trim();
  }

  /**
   * An ArrayBuffer of exactly `bytes` bytes from the process's malloc, uninitialised (like Pool.alloc, unlike
   * `new ArrayBuffer`, whose calloc would clear a pool block on every call): from `minBytes` up the process
   * pool serves it, under the plan and the recording like every other malloc of the process, so a tensor
   * made here shares the plan's memory with the runtime's own instead of holding a second pool's. Give it
   * back with release(); one never released goes back when the garbage collector frees it.
   */
  alloc(bytes: number): ArrayBuffer {
    checkInteger(bytes, 'bytes', 1, MAX_ALLOC_BYTES);
    // allocUnsafeSlow: an ArrayBuffer of its own (no slab), allocated without zero-filling, i.e. by malloc.
    const buffer = Buffer.allocUnsafeSlow(bytes).buffer as ArrayBuffer;
    this.#buffers.add(buffer);
    return buffer;
  }

  /**
   * Gives a buffer from alloc() back to malloc at once (rather than at a garbage collection): it is detached,
   * so every view on it has length 0 from here. Takes the ArrayBuffer or any view on it. Throws, changing
   * nothing, for a buffer already released or one alloc() did not make.
   */
  release(buffer: ArrayBuffer | ArrayBufferView): void {
    const arrayBuffer = ArrayBuffer.isView(buffer) ? buffer.buffer : buffer;
    if (!(arrayBuffer instanceof ArrayBuffer)) {
      throw invalidArgument('type', `release() takes an ArrayBuffer from processPool().alloc() or a view on one, got ${describe(buffer)}`);
    }
    if (this.#released.has(arrayBuffer)) {
      throw new TensorPoolError('ERR_TP_DOUBLE_RELEASE', 'this buffer was already released (it is detached)');
    }
    if (!this.#buffers.has(arrayBuffer)) throw new TensorPoolError('ERR_TP_FOREIGN_BUFFER', 'this buffer was not made by processPool().alloc()');
    if (arrayBuffer.byteLength === 0) {
      // alloc() makes no empty buffer: this one's memory moved to another (postMessage, structuredClone or
      // transfer()), which frees it when collected; releasing this one would free nothing.
      throw new TensorPoolError(
        'ERR_TP_FOREIGN_BUFFER',
        'this buffer was transferred (it is detached): its memory belongs to the ArrayBuffer it moved to, which gives it back when collected',
      );
    }
    this.#buffers.delete(arrayBuffer);
    this.#released.add(arrayBuffer);
    native.freeBuffer(arrayBuffer); // an ArrayBuffer of its own is always detachable
  }
}

let instance: ProcessPool | null | undefined;

/**
 * The process pool of the preload library, or null when this process does not preload it. Throws
 * ERR_TP_PRELOAD_MISMATCH when the library preloaded comes from another build than this package.
 */
export function processPool(): ProcessPool | null {
  if (instance === undefined) {
    let info;
    try {
      info = native.processPoolInfo();
    } catch (error) {
      throw fromNative(error);
    }
    instance = info && new ProcessPool(info);
  }
  return instance;
}

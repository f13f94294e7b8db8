/**
 * The memory pool: tensor buffers served from one pre-mapped, pre-faulted arena of size-class blocks
 * (S0), with the operating system as the fallback.
 */
import { constants as bufferConstants } from 'node:buffer';
import os from 'node:os';

import { Adaptation, checkAdaptiveOptions, type AdaptiveOptions } from '../process/adaptive.js';
import { TensorPoolError, fromNative } from '../errors.js';
import { FRONT_CACHE_LOG_ENTRIES, FRONT_CACHE_SUPPORTED, FrontCache, type FrontCacheOptions, type FrontCacheStats } from './front-cache.js';
import { native, ReleaseCode, type NativePool } from '../native.js';
import { OffsetPlan } from '../offsets/offset-plan.js';
import { Plan } from '../plan/plan.js';
import { Stream, nativeStreamOf } from './stream.js';
import { arenaBytesOf, checkPlanSpec, toNativePlan, type PlanSpec } from '../plan/plan-spec.js';
import { PoolControl, type PoolStats as ControlStats } from './pool-control.js';
import type { Trace } from '../trace/trace.js';
import { checkBoolean, checkInteger, checkOptions, describe, invalidArgument } from '../validate.js';

/** Options of `new Pool()`: the plan, the memory behind it, and how the pool grows and serves. */
export interface PoolOptions {
  /**
   * The classes and block counts: a Plan, any `{ interval, classes: [{ size, blocks }] }`, or the path of a
   * plan JSON file. Without one the pool uses its default classes (64 B, then four per doubling from 128 B
   * to 64 MiB) and grows: a class with no free block gets a new block carved from the reservation.
   */
  plan?: PlanSpec | string;
  /**
   * Offsets mode: an OffsetPlan (or its file). The k-th allocation after markIteration() is served at its
   * planned offset in an arena of the plan's height when it asks for the planned size and that range is
   * free; anything else goes to the size classes (the plan's, else the default growing ones), then the OS.
   */
  offsets?: OffsetPlan | string;
  /** Fault every arena page in when it is mapped, so the steady state takes no page faults. Default true. */
  prefault?: boolean;
  /** madvise(MADV_HUGEPAGE) on the arena. Default false. */
  hugePages?: boolean;
  /** mlock the arena: page-locked host memory. Fails with a message naming RLIMIT_MEMLOCK. Default false. */
  lock?: boolean;
  /**
   * Carve new blocks on a miss instead of going to the OS. Default: true, except for a plan with `adaptive`
   * (whose re-planning is driven by the OS fallbacks of departures). The default classes grow an empty class
   * before a larger one lends; a plan borrows as it was trained to and grows the smallest class that fits
   * only when no free block fits (a time-shared plan: first, for what its schedule does not place).
   */
  grow?: boolean;
  /** Address space reserved for growth, in bytes. Default 1 GiB. Reserved, not resident. */
  growReserve?: number;
  /** OS fallbacks of at least this many bytes are mmap'd, smaller ones come from the C heap. Default 256 KiB. */
  osMapThreshold?: number;
  /**
   * Adaptive mode (lib/process/adaptive.ts): record the first iterations, train a plan once their pattern is
   * stable, switch to it, and re-plan when the run drifts from it. Iterations are delimited by
   * markIteration(). `true` takes every default. With `plan`, the pool starts planned and re-plans on
   * drift. Not with `offsets`.
   */
  adaptive?: boolean | AdaptiveOptions;
  /**
   * A front cache of released ArrayBuffers (lib/pool/front-cache.ts), so that a block released and allocated
   * again at the same byte length costs no call into native code. Needs `ArrayBuffer.prototype.transfer`
   * (Node.js >= 22); elsewhere the option is accepted and the pool goes without. Default true, except in
   * offsets mode (positions there are addresses: not with offsets). `{ maxBytes, maxPerSize }` bound it.
   */
  frontCache?: boolean | FrontCacheOptions;
}

const POOL_OPTIONS = ['plan', 'offsets', 'prefault', 'hugePages', 'lock', 'grow', 'growReserve', 'osMapThreshold', 'adaptive', 'frontCache'] as const;


export type { ClassStats } from './pool-control.js';
export type { FrontCacheOptions, FrontCacheStats } from './front-cache.js';

/** A pool's counters (PoolControl's) and its front cache's. */
export interface PoolStats extends ControlStats {
  /** The front cache's own counters, or null when the pool has none (Node.js < 22, offsets mode, turned off). */
  frontCache: FrontCacheStats | null;
}

/**
 * What Pool.share() returns: plain data naming the pool, to send to a worker_thread of this process
 * (`workerData`, `postMessage`) for Pool.attach().
 */
export interface SharedPool {
  readonly kind: 'tensorpool.SharedPool';
  /** The pool's number in this process. */
  readonly id: number;
  /** The process it belongs to: a pool is shared between the threads of one process, not between processes. */
  readonly pid: number;
  /** The options the pool was made with. */
  readonly options: Pool['options'];
  /** Whether the pool runs in offsets mode (handles attached to it then have no front cache). */
  readonly offsets: boolean;
  /** One word every handle reads: the owner's close() raises it, so attached handles stop serving from their caches too. */
  readonly closedFlag: SharedArrayBuffer;
}

/** Options of Pool.attach(): how this environment's handle on a shared pool serves. */
export interface AttachOptions {
  /** This handle's own front cache (PoolOptions.frontCache). Default true, except on a pool in offsets mode. */
  frontCache?: boolean | FrontCacheOptions;
}

// The private road into Pool's constructor, for Pool.attach().
class Attachment {
  constructor(
    readonly native: NativePool,
    readonly shared: SharedPool,
    readonly frontCache: Required<FrontCacheOptions> | null,
  ) {}
}

/** Typed-array constructors pool.allocArray accepts. */
export interface TypedArrayConstructor<T extends ArrayBufferView> {
  /** Makes a view of `length` elements over `buffer` from `byteOffset`. */
  new (buffer: ArrayBuffer, byteOffset?: number, length?: number): T;
  readonly BYTES_PER_ELEMENT: number;
}

// Pool → its native handle, for lib/ code that hands the pool to other native parts (the replayer).
const handles = new WeakMap<Pool, NativePool>();

/** Internal: the native pool behind a Pool (not exported from the package). */
export function nativePoolOf(pool: Pool): NativePool {
  return handles.get(pool)!;
}

/** The largest single block: what an ArrayBuffer can address in this Node.js. */
export const MAX_ALLOC_BYTES = Math.min(bufferConstants.MAX_LENGTH, 2 ** 47);

/**
 * Internal: gives back and turns off a pool's front cache, for a pool that native threads allocate from
 * too (lib/onnxruntime/allocator.ts), where the order in which the pool learns of JS's allocations matters.
 */
export let stopFrontCache: (pool: Pool) => void;

/**
 * A memory pool in this process: typed arrays and ArrayBuffers over pre-faulted blocks of size classes, which
 * the next iteration reuses instead of faulting fresh memory in; with a plan trained from a trace, the classes
 * and where each allocation goes are laid out from the start. Give a buffer back with release().
 */
export class Pool {
  static {
    stopFrontCache = (pool) => {
      pool.#cache?.close();
      pool.#cache = null;
    };
  }

  readonly #native: NativePool;
  readonly #control: PoolControl;
  #cache: FrontCache | null = null;
  #closed = false;
  #poolClosed: Int32Array | null = null; // SharedPool.closedFlag, once shared
  /** The offset plan of offsets mode, or null (also on an attached handle). */
  readonly offsetPlan: OffsetPlan | null;
  readonly options: Readonly<Required<Omit<PoolOptions, 'plan' | 'offsets' | 'adaptive' | 'frontCache'>>>;
  /**
   * Whether this handle was attached to a pool another thread shared (Pool.attach): it allocates, releases
   * and reads the stats of that pool; iteration marks, recording and the plan belong to the handle that made
   * the pool, and close() closes this handle only.
   */
  readonly attached: boolean;

  /**
   * A pool: the plan's arena reserved (and pre-faulted unless `prefault: false`), or the default size classes
   * when no plan is given. Bad options fail with a TensorPoolError (ERR_TP_INVALID_ARGUMENT).
   */
  constructor(options?: PoolOptions) {
    if (options instanceof Attachment) {
      this.#native = options.native;
      this.options = options.shared.options;
      this.offsetPlan = null;
      this.attached = true;
      this.#poolClosed = new Int32Array(options.shared.closedFlag);
      this.#control = new PoolControl(this.#native, null, null);
      this.#serve(options.frontCache);
      this.#cache?.share();
      return;
    }
    this.attached = false;
    const o = checkOptions<PoolOptions>(options, 'options', POOL_OPTIONS);
    const plan =
      o.plan === undefined ? null : typeof o.plan === "string" ? Plan.read(o.plan) : o.plan instanceof Plan ? o.plan : checkPlanSpec(o.plan);
    if (o.offsets !== undefined && !(o.offsets instanceof OffsetPlan) && typeof o.offsets !== 'string') {
      throw invalidArgument('type', `options.offsets must be an OffsetPlan or the path of one, got ${describe(o.offsets)}`);
    }
    this.offsetPlan = o.offsets === undefined ? null : typeof o.offsets === 'string' ? OffsetPlan.read(o.offsets) : o.offsets;
    this.options = Object.freeze({
      prefault: o.prefault === undefined ? true : checkBoolean(o.prefault, 'options.prefault'),
      hugePages: o.hugePages === undefined ? false : checkBoolean(o.hugePages, 'options.hugePages'),
      lock: o.lock === undefined ? false : checkBoolean(o.lock, 'options.lock'),
      // A planned pool that adapts does not grow: a departure from its plan must show as OS fallbacks, the
      // drift that makes it re-plan.
      grow: o.grow === undefined ? plan === null || !o.adaptive : checkBoolean(o.grow, 'options.grow'),
      growReserve: o.growReserve === undefined ? 2 ** 30 : checkInteger(o.growReserve, 'options.growReserve', 0, 2 ** 46),
      osMapThreshold:
        o.osMapThreshold === undefined ? 256 * 1024 : checkInteger(o.osMapThreshold, 'options.osMapThreshold', 1),
    });
    const adaptive = o.adaptive === undefined || o.adaptive === false ? null : checkAdaptiveOptions(o.adaptive);
    if (adaptive && this.offsetPlan) {
      throw invalidArgument('type', 'options.adaptive and options.offsets cannot be combined: an offset plan is static');
    }
    const frontCache = checkFrontCacheOptions(o.frontCache, this.offsetPlan !== null);
    // Pre-faulting (or locking) more than the machine has would push it into swap or the OOM killer before
    // the first allocation: refused here, with the figures, before anything is mapped.
    const committed = (plan ? arenaBytesOf(plan) : 0) + (this.offsetPlan?.height ?? 0);
    if ((this.options.prefault || this.options.lock) && committed > os.totalmem()) {
      throw new TensorPoolError(
        'ERR_TP_OUT_OF_MEMORY',
        `the plan's arena of ${committed} bytes is larger than this machine's memory (${os.totalmem()} bytes); use a smaller plan, or prefault: false to reserve without committing`,
      );
    }
    try {
      const offsets = this.offsetPlan && { height: this.offsetPlan.height, sizes: this.offsetPlan.sizes, offsets: this.offsetPlan.offsets };
      const frontCacheEntries = frontCache && FRONT_CACHE_SUPPORTED ? FRONT_CACHE_LOG_ENTRIES : 0;
      this.#native = new native.NativePool(plan && toNativePlan(plan), { ...this.options, offsets, frontCacheEntries });
    } catch (error) {
      throw fromNative(error);
    }
    const adaptation = adaptive && new Adaptation(this.#native, adaptive, plan && (plan instanceof Plan ? plan : new Plan(plan)));
    this.#control = new PoolControl(this.#native, plan, adaptation);
    this.#serve(frontCache);
  }

  // The last step of either constructor: the front cache over the native log (when asked for and the binding
  // made one), and the handle other lib/ code reaches the native pool by.
  #serve(frontCache: Required<FrontCacheOptions> | null): void {
    const log = frontCache && this.#native.frontCacheLog();
    if (log) this.#cache = new FrontCache(this.#native, log, frontCache!);
    handles.set(this, this.#native);
  }

  /**
   * Another handle on a pool that a thread of this process shared (`pool.share()` there, sent here as
   * `workerData` or in a message): a worker_thread allocating from its parent's pool. Blocks come from the
   * same arena, the stats count every handle's traffic, and a buffer is released through the handle that
   * allocated it (buffers stay in the thread that made them). Once the pool is closed by its owner, alloc()
   * throws ERR_TP_CLOSED here too; a pool stays mapped until the last handle and buffer of every thread
   * are gone.
   */
  static attach(shared: SharedPool, options?: AttachOptions): Pool {
    if (typeof shared !== 'object' || shared === null || (shared as { kind?: unknown }).kind !== 'tensorpool.SharedPool') {
      throw invalidArgument('type', `Pool.attach() takes what pool.share() returned, got ${describe(shared)}`);
    }
    const id = checkInteger(shared.id, 'shared.id', 1);
    if (shared.pid !== process.pid) {
      throw new TensorPoolError(
        'ERR_TP_NOT_SHARED',
        `this pool was shared by process ${String(shared.pid)}, not this one (${process.pid}): pools are shared between the threads of one process`,
      );
    }
    if (typeof shared.options !== 'object' || shared.options === null) {
      throw invalidArgument('type', `shared.options must be the options object pool.share() made, got ${describe(shared.options)}`);
    }
    if (!(shared.closedFlag instanceof SharedArrayBuffer) || shared.closedFlag.byteLength !== 4) {
      throw invalidArgument('type', `shared.closedFlag must be the SharedArrayBuffer pool.share() made, got ${describe(shared.closedFlag)}`);
    }
    const o = checkOptions<AttachOptions>(options, 'options', ['frontCache']);
    const frontCache = checkFrontCacheOptions(o.frontCache, shared.offsets === true);
    try {
      const handle = new native.NativePool(id, { frontCacheEntries: frontCache && FRONT_CACHE_SUPPORTED ? FRONT_CACHE_LOG_ENTRIES : 0 });
      const attachedOptions = Object.freeze({ ...shared.options });
      return new Pool(new Attachment(handle, { ...shared, options: attachedOptions }, frontCache) as PoolOptions);
    } catch (error) {
      throw fromNative(error);
    }
  }

  /**
   * Names this pool for Pool.attach() in another thread of this process (a worker_thread). The answer is
   * plain data, to send as `workerData` or in a message. Sharing keeps nothing alive: attaching fails once
   * the pool is gone.
   */
  share(): SharedPool {
    if (this.#isClosed()) throw closedError();
    this.#cache?.share();
    this.#poolClosed ??= new Int32Array(new SharedArrayBuffer(4));
    return {
      kind: 'tensorpool.SharedPool',
      id: this.#native.share(),
      pid: process.pid,
      options: { ...this.options },
      offsets: this.offsetPlan !== null,
      closedFlag: this.#poolClosed.buffer as SharedArrayBuffer,
    };
  }

  // This handle closed, or (attached) the pool closed by its owner.
  #isClosed(): boolean {
    if (this.#closed) return true;
    if (this.#poolClosed === null || Atomics.load(this.#poolClosed, 0) === 0) return false;
    if (this.attached) this.#cache?.close();
    return true;
  }

  /**
   * The plan serving now: the one the pool was built with, or the last one adaptive mode trained (a Plan:
   * write() it and start the next run with it). Null while the default classes serve, and on an attached handle.
   */
  get plan(): PlanSpec | null {
    return this.#control.plan;
  }

  /**
   * A zero-copy ArrayBuffer of exactly `bytes` bytes over pool memory, 64-byte aligned. Its contents are
   * whatever the block held before (like malloc, unlike `new ArrayBuffer`). Give it back with release().
   */
  alloc(bytes: number): ArrayBuffer {
    if (this.#isClosed()) throw closedError();
    checkInteger(bytes, 'bytes', 1, MAX_ALLOC_BYTES);
    const cache = this.#cache;
    if (cache !== null) {
      const cached = cache.take(bytes);
      if (cached !== undefined) return cached;
    }
    try {
      return cache !== null ? cache.allocNative(bytes) : this.#native.alloc(bytes);
    } catch (error) {
      throw fromNative(error);
    }
  }

  /** A typed array of `length` elements over a fresh block, e.g. `pool.allocArray(Float32Array, 1024)`. */
  allocArray<T extends ArrayBufferView>(type: TypedArrayConstructor<T>, length: number): T {
    if (typeof type !== 'function' || typeof type.BYTES_PER_ELEMENT !== 'number') {
      throw invalidArgument('type', `type must be a typed-array constructor such as Float32Array, got ${describe(type)}`);
    }
    checkInteger(length, 'length', 1, Math.floor(MAX_ALLOC_BYTES / type.BYTES_PER_ELEMENT));
    const buffer = this.alloc(length * type.BYTES_PER_ELEMENT);
    try {
      return new type(buffer, 0, length);
    } catch (error) {
      this.release(buffer); // a constructor that throws does not keep the block
      throw error;
    }
  }

  /**
   * A Float32Array of `length` elements over a fresh block (allocArray(Float32Array, length)); uninitialised.
   */
  float32(length: number): Float32Array {
    return this.allocArray(Float32Array, length);
  }
  /** A Float64Array of `length` elements over a fresh block; uninitialised. */
  float64(length: number): Float64Array {
    return this.allocArray(Float64Array, length);
  }
  /** An Int32Array of `length` elements over a fresh block; uninitialised. */
  int32(length: number): Int32Array {
    return this.allocArray(Int32Array, length);
  }
  /** A Uint8Array of `length` elements over a fresh block; uninitialised. */
  uint8(length: number): Uint8Array {
    return this.allocArray(Uint8Array, length);
  }

  /**
   * Gives a block back. Takes the ArrayBuffer from alloc() or any view on it (the whole block is
   * released). The buffer is detached at once: every view on it now has length 0, so nothing can touch
   * memory that may already belong to the next tensor. Throws, changing nothing, when the buffer was
   * already released or was not made by this pool. Allowed after close(), so blocks can still come back.
   *
   * With `{ stream }` (S4) the release is stream-ordered: an event is recorded on the stream (taken from
   * the pool's event pool) and the block is reused only once the stream has passed it, so work already
   * queued on the stream (a copy still reading the block) finishes first. Every alloc() reclaims the
   * blocks whose events have passed; reclaim() does it on demand.
   */
  release(buffer: ArrayBuffer | ArrayBufferView, options?: { stream?: Stream }): void {
    if (options === undefined && this.#cache !== null && !this.#isClosed() && typeof buffer === 'object' && buffer !== null) {
      if (this.#cache.put((ArrayBuffer.isView(buffer) ? buffer.buffer : buffer) as ArrayBuffer)) return;
    }
    const o = checkOptions<{ stream?: Stream }>(options, 'options', ['stream']);
    if (o.stream !== undefined && !(o.stream instanceof Stream)) {
      throw invalidArgument('type', `options.stream must be a Stream, got ${describe(o.stream)}`);
    }
    const arrayBuffer = ArrayBuffer.isView(buffer) ? buffer.buffer : buffer;
    if (!(arrayBuffer instanceof ArrayBuffer)) {
      throw invalidArgument(
        'type',
        `release() takes an ArrayBuffer from pool.alloc() or a view on one, got ${describe(buffer)}`,
      );
    }
    const code = o.stream ? this.#native.release(arrayBuffer, nativeStreamOf(o.stream)) : this.#native.release(arrayBuffer);
    switch (code) {
      case ReleaseCode.Released:
        return;
      case ReleaseCode.Detached:
      case ReleaseCode.NotLive:
        throw new TensorPoolError('ERR_TP_DOUBLE_RELEASE', 'this buffer was already released (it is detached)');
      case ReleaseCode.NotOwned:
        throw new TensorPoolError('ERR_TP_FOREIGN_BUFFER', 'this buffer was not made by this pool');
    }
  }

  /**
   * Marks the start of an iteration (a training step, an inference batch): the next allocation is
   * position 0 of the plan's schedule. Call it at the same point of every iteration as in the trace the
   * plan was trained on. In an adaptive pool this is also where the iteration that ended is judged, a plan
   * trained on a worker thread is taken and a switch prepared in the background is installed, once each is
   * done (the mark never waits for them); a synchronous switch (adaptive.background false) trains the plan
   * and maps and pre-faults its arena here.
   */
  markIteration(): void {
    if (this.#closed) throw closedError();
    if (this.attached) throw notOwnerError('markIteration()');
    this.#cache?.markIteration();
    this.#control.markIteration();
  }

  /**
   * Adaptive mode: settles once the work it has under way in the background is done (the plan's training on
   * a worker thread, then building its arena), so that the next markIteration() moves on; at once when none
   * is (stats().adaptive.ready says the same without waiting). The thread is not blocked meanwhile. Awaited
   * before every markIteration(), a plan serves from the second mark after the one that decided to train it,
   * on every run; without it, from the first mark at which the work is done, which depends on how long it
   * took. Settles at once in a pool without adaptive mode.
   */
  adaptiveReady(): Promise<void> {
    return this.#control.adaptiveReady();
  }

  /**
   * Starts recording every allocation and release this pool serves, and the iteration marks, natively (no
   * JS work per event), until stopRecording(). At most `maxEvents` events (16 bytes each) are held; at the
   * limit recording stops and stats().recording.truncated says so. An adaptive pool records on its own:
   * its switches carry the trace each plan was trained on.
   */
  record(options?: { maxEvents?: number }): void {
    if (this.#closed) throw closedError();
    if (this.attached) throw notOwnerError('record()');
    this.#control.record(options);
  }

  /**
   * Stops recording and returns what was recorded as a Trace (format 'recorded'), which train() and
   * replay() take and writeCsv() saves. Releases of blocks allocated before record() are left out (counted
   * in trace.anomalies.freeOfUnknown); blocks still live count as never freed.
   */
  stopRecording(name = 'recorded'): Trace {
    if (this.attached) throw notOwnerError('stopRecording()');
    return this.#control.stopRecording(name);
  }

  /** Returns the stream-ordered releases whose events have passed; how many blocks came back. */
  reclaim(): number {
    return this.#native.reclaim();
  }

  /**
   * The pool's counters now: allocations, how they were served (class hits, borrows, OS fallbacks, the
   * schedule), its classes, the front cache's.
   */
  stats(): PoolStats {
    return { ...this.#control.stats(), frontCache: this.#cache?.stats() ?? null };
  }

  /**
   * Stops serving: alloc() throws ERR_TP_CLOSED from now on. Memory is never unmapped under a live buffer:
   * an arena is unmapped as soon as none of its blocks is live (at once when all were released), otherwise
   * when the last live block is released or its buffer is garbage-collected. Idempotent. On an attached
   * handle it closes that handle only (its front cache goes back to the pool).
   */
  close(): void {
    this.#closed = true;
    this.#cache?.close();
    if (this.attached) return;
    if (this.#poolClosed) Atomics.store(this.#poolClosed, 0, 1);
    this.#control.adaptation?.close();
    this.#native.close();
  }

  /** This handle is closed, or (attached) the pool's owner closed it. */
  get closed(): boolean {
    return this.#isClosed();
  }
}

function checkFrontCacheOptions(value: unknown, offsetsMode: boolean): Required<FrontCacheOptions> | null {
  if (value === false || (value === undefined && offsetsMode)) return null;
  if (offsetsMode) throw invalidArgument('type', 'options.frontCache and options.offsets cannot be combined: in offsets mode a position is an address');
  const o = value === undefined || value === true ? {} : checkOptions<FrontCacheOptions>(value, 'options.frontCache', ['maxBytes', 'maxPerSize', 'maxDormant']);
  return {
    maxBytes: o.maxBytes === undefined ? 256 * 2 ** 20 : checkInteger(o.maxBytes, 'options.frontCache.maxBytes', 0),
    maxPerSize: o.maxPerSize === undefined ? 64 : checkInteger(o.maxPerSize, 'options.frontCache.maxPerSize', 0, 2 ** 20),
    maxDormant: o.maxDormant === undefined ? 4096 : checkInteger(o.maxDormant, 'options.frontCache.maxDormant', 0, 2 ** 20),
  };
}

function notOwnerError(what: string): TensorPoolError {
  return new TensorPoolError(
    'ERR_TP_NOT_OWNER',
    `${what} belongs to the Pool that made this pool: an attached handle allocates and releases, the owner marks iterations and records`,
  );
}

function closedError(): TensorPoolError {
  return new TensorPoolError('ERR_TP_CLOSED', 'the pool is closed');
}

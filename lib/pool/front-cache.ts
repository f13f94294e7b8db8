/**
 * The front cache of a Pool (tcmalloc's per-thread cache, with the isolate as the thread): ArrayBuffers
 * released by their owners, kept per byte length and handed out again without a call into native code.
 *
 * A pool block crosses into JS as an external ArrayBuffer, and making one and detaching it costs N-API
 * about a microsecond each way. `ArrayBuffer.prototype.transfer()` (Node >= 22) moves a buffer's memory to
 * a new handle and detaches the old one, in JS: so release() transfers the owner's buffer into the cache
 * (every view the owner kept now reads length 0, as after a native release) and alloc() hands the new
 * handle out. A handle keeps its length, so the cache is kept by exact byte length.
 *
 * The native pool still sees every cached alloc and release, in order: the cache writes them to a log in
 * memory shared with the binding (native/napi/front_cache_log.h), which applies it before anything else
 * reaches the pool from this thread. A cached block is neither live nor free to the pool: it is never
 * served to another request, and the pool is told (Pool::alloc's cachedUpTo) which classes the cache holds,
 * so that it answers "would miss" instead of borrowing, growing or going to the OS while a cached block
 * of the class sits here; the cache then gives those blocks back and the request is served as if there
 * were no cache. In a time-shared plan a cached block keeps the blocks sharing its memory busy: the cache
 * keeps one only after a use its schedule names it again before any of those, and a request whose block
 * lies under a cached one is answered "would miss" as well.
 *
 * Blocks go back to the native pool when a stack or the cache is full, at markIteration() (those not needed
 * during the iteration that ended: each size's low-water mark), when a new plan starts serving, and at
 * close().
 *
 * A block the cache may not keep (its schedule gives its memory to another block first, a lent block, a full
 * cache) goes back to the native pool at release, but its handle need not die with it: the cache transfers
 * it to a *dormant* handle of its own, reachable by nobody else, and when the pool serves the same address
 * with the same length again (every iteration, where a plan is followed) the binding hands that handle out
 * instead of making a new one (native/napi/handle_book.h), and the finalizer follows it. Dormant handles hold
 * no pool memory: they are bounded in number (maxDormant) and dropped when unused for DORMANT_MARKS marks.
 */
import type { NativePool } from '../native.js';

/** Whether this Node.js has what the cache needs (`ArrayBuffer.prototype.transfer`, Node >= 22). */
export const FRONT_CACHE_SUPPORTED = typeof (ArrayBuffer.prototype as { transfer?: unknown }).transfer === 'function';

/**
 * The front cache (PoolOptions.frontCache): released buffers kept in JavaScript to serve the next allocation
 * of the same byte length without a native call (Node.js >= 22).
 */
export interface FrontCacheOptions {
  /** Bytes the cache holds at most (requested bytes of its buffers). Default 256 MiB. */
  maxBytes?: number;
  /** Buffers of one byte length it holds at most. Default 64. */
  maxPerSize?: number;
  /** Dormant handles it keeps at most (handles of blocks back in the pool, to hand out again). Default 4096; 0: none. */
  maxDormant?: number;
}

/** The front cache's counters (PoolStats.frontCache). */
export interface FrontCacheStats {
  /** Allocations the cache served (counted in the pool's allocs and hits too). */
  served: number;
  /** Releases it took (counted in the pool's releases). */
  taken: number;
  /** Blocks it gave back to the native pool. */
  returned: number;
  /** Buffers and bytes it holds now. */
  buffers: number;
  bytes: number;
  /** Releases whose handle it kept dormant; allocations a dormant handle served (counted in the pool's too). */
  slept: number;
  woken: number;
  /** Dormant handles it holds now. */
  dormant: number;
}

/** Marks after which a dormant handle not handed out again is dropped. */
export const DORMANT_MARKS = 16;

/** Entries the log holds before the cache has the binding apply it (the capacity a Pool asks the binding for). */
export const FRONT_CACHE_LOG_ENTRIES = 4096;
// Slots of the log (FrontCacheLog::Slot).
const COUNT = 0;
const REPLY_ADDRESS = 1;
const REPLY_CLASS = 2;
const REPLY_BLOCK = 3;
const GENERATION = 4;
const UPCOMING_COUNT = 5;
const UPCOMING_MORE = 6;
const UPCOMING_USED = 7;
const UPCOMING = 8;
const UPCOMING_MAX = 64;
// An upcoming entry: size, class, block (-1: any of the class), keep (0 or 1).
const UPCOMING_FIELDS = 4;
const ENTRIES = UPCOMING + UPCOMING_FIELDS * UPCOMING_MAX;

/**
 * A block of the cache's pool: its cache, where it is, its class (-1 where the cache may not keep it), the
 * generation of classes it came from, and in a time-shared plan its number in the layout (else -1). `keep`:
 * whether its current use lets the cache keep it afterwards (a time-shared block is kept only where its
 * schedule names it again before any block sharing its memory: held here it keeps them busy). `slept`: the
 * mark count when its handle last went dormant.
 */
interface Block {
  readonly cache: FrontCache;
  readonly address: number;
  classIndex: number;
  generation: number;
  block: number;
  keep: boolean;
  slept: number;
}

// Buffers of cacheable blocks carry their Block in a private field: a base class whose constructor returns
// the object it is given lets a subclass add a private field to any object, ArrayBuffers included. Only this
// module can read it, nobody can forge it, and reading it costs a property load, not a WeakMap lookup.
class Identity {
  constructor(target: object) {
    return target as Identity;
  }
}
class Tag extends Identity {
  readonly #block: Block;
  private constructor(buffer: ArrayBuffer, block: Block) {
    super(buffer);
    this.#block = block;
  }
  static attach(buffer: ArrayBuffer, block: Block): void {
    new Tag(buffer, block);
  }
  static of(value: object): Block | undefined {
    return #block in value ? (value as unknown as Tag).#block : undefined;
  }
}

interface SizeStack {
  readonly buffers: ArrayBuffer[];
  /** The fewest buffers held since the last mark: that many were not needed during the iteration. */
  lowWater: number;
}

type Transferable = ArrayBuffer & { transfer(): ArrayBuffer; readonly detached: boolean };

export class FrontCache {
  readonly #native: NativePool;
  readonly #log: Float64Array;
  readonly #maxBytes: number;
  readonly #maxPerSize: number;
  readonly #maxDormant: number;
  readonly #stacks = new Map<number, SizeStack>();
  /** Dormant handles by address (rarely more than one length per address). */
  readonly #dormant = new Map<number, ArrayBuffer[]>();
  #dormantCount = 0;
  #marks = 0;
  /** Other threads allocate from the pool too (share(), or an attached handle): blocks go back at once. */
  #shared = false;
  #slept = 0;
  #woken = 0;
  #generation: number;
  #buffers = 0;
  #bytes = 0;
  /** At least the largest class index of a buffer held (-1: none held); exact again after every give-back. */
  #classBound = -1;
  #served = 0;
  #taken = 0;
  #returned = 0;

  /** Pool's constructor makes one when FRONT_CACHE_SUPPORTED and the native pool has a log. */
  constructor(nativePool: NativePool, log: Float64Array, options: Required<FrontCacheOptions>) {
    this.#native = nativePool;
    this.#log = log;
    this.#maxBytes = options.maxBytes;
    this.#maxPerSize = options.maxPerSize;
    this.#maxDormant = options.maxDormant;
    this.#generation = log[GENERATION];
  }

  /** A cached buffer of exactly `bytes` bytes, or undefined. */
  take(bytes: number): ArrayBuffer | undefined {
    const log = this.#log;
    if (log[GENERATION] !== this.#generation) this.#newGeneration();
    const stack = this.#stacks.get(bytes);
    if (stack === undefined || stack.buffers.length === 0) return undefined;
    const buffers = stack.buffers;
    let at = buffers.length - 1;
    if (log[UPCOMING_COUNT] >= 0) {
      at = this.#scheduled(bytes, buffers);
      if (at < 0) return undefined;
    }
    const buffer = buffers[at];
    buffers[at] = buffers[buffers.length - 1];
    buffers.pop();
    const block = Tag.of(buffer)!;
    if (buffers.length < stack.lowWater) stack.lowWater = buffers.length;
    this.#buffers--;
    this.#bytes -= bytes;
    this.#served++;
    this.#append(block.address, bytes);
    return buffer;
  }

  /**
   * A plan with a schedule puts each allocation of an iteration in a class of training's choice, with as
   * many blocks per class as that placement needs (a time-shared plan: in a block of its choice): a buffer
   * is served from here only where the schedule's next entry asks for this size from its class (and block),
   * else native code decides (it may borrow as planned). Answers where in `buffers` the one to serve is
   * (the entry then counts as served, and says whether the cache may keep the block afterwards), or -1.
   */
  #scheduled(bytes: number, buffers: ArrayBuffer[]): number {
    const log = this.#log;
    let used = log[UPCOMING_USED];
    if (used === log[UPCOMING_COUNT]) {
      if (log[UPCOMING_MORE] === 0) return -1; // the run is lost, or the schedule ends
      this.#native.settle(); // applies what was served, and publishes the entries after those
      used = 0;
    }
    const entry = UPCOMING + UPCOMING_FIELDS * used;
    if (used >= log[UPCOMING_COUNT] || log[entry] !== bytes) return -1;
    const classIndex = log[entry + 1];
    const named = log[entry + 2];
    for (let at = buffers.length - 1; at >= 0; at--) {
      const block = Tag.of(buffers[at])!;
      if (named >= 0 ? block.block === named : block.classIndex === classIndex) {
        block.keep = log[entry + 3] === 1;
        log[UPCOMING_USED] = used + 1;
        return at;
      }
      if (named < 0) return -1; // interchangeable blocks: the top one, or none
    }
    return -1;
  }

  /** A block from the native pool, on a new handle or a dormant one (tagged with the block it now is). */
  allocNative(bytes: number): ArrayBuffer {
    let buffer = this.#buffers === 0 ? this.#native.alloc(bytes) : this.#native.alloc(bytes, this.#classBound);
    if (buffer === null) {
      this.#giveBack((block) => block.classIndex >= this.#log[REPLY_CLASS]);
      buffer = this.#native.alloc(bytes);
    }
    const log = this.#log;
    const classIndex = log[REPLY_CLASS];
    if (buffer === undefined) {
      buffer = this.#wake(log[REPLY_ADDRESS], bytes);
      const block = Tag.of(buffer)!;
      block.classIndex = classIndex;
      block.generation = this.#generation;
      block.block = log[REPLY_BLOCK];
      block.keep = classIndex >= 0;
      return buffer;
    }
    Tag.attach(buffer!, { cache: this, address: log[REPLY_ADDRESS], classIndex, generation: this.#generation, block: log[REPLY_BLOCK], keep: classIndex >= 0, slept: 0 });
    return buffer!;
  }

  /**
   * Takes a released buffer into the cache, detaching the caller's handle: true. False when the buffer is
   * none the cache may keep (not from this pool, not live, of an older plan, or the cache is full): the
   * caller releases it natively, which tells those cases apart.
   */
  put(buffer: ArrayBuffer): boolean {
    const block = Tag.of(buffer);
    if (block === undefined || block.cache !== this || (buffer as Transferable).detached) return false;
    if (this.#log[GENERATION] !== this.#generation) this.#newGeneration();
    const bytes = buffer.byteLength;
    if (!block.keep || block.generation !== this.#generation || bytes > this.#maxBytes - this.#bytes) return this.#sleep(buffer, block);
    let stack = this.#stacks.get(bytes);
    if (stack === undefined) {
      stack = { buffers: [], lowWater: 0 };
      this.#stacks.set(bytes, stack);
    }
    if (stack.buffers.length >= this.#maxPerSize) return this.#sleep(buffer, block);
    const kept = (buffer as Transferable).transfer();
    Tag.attach(kept, block);
    stack.buffers.push(kept);
    this.#buffers++;
    this.#bytes += bytes;
    this.#taken++;
    if (block.classIndex > this.#classBound) this.#classBound = block.classIndex;
    this.#append(block.address, 0);
    return true;
  }

  /**
   * The block goes back to the native pool (an entry of the log) and its handle stays here, dormant: true. False
   * when the cache holds as many dormant handles as it may (the caller releases the buffer natively).
   */
  #sleep(buffer: ArrayBuffer, block: Block): boolean {
    if (this.#dormantCount >= this.#maxDormant) return false;
    const kept = (buffer as Transferable).transfer();
    Tag.attach(kept, block);
    this.#slept++;
    this.#keepDormant(kept, block);
    return true;
  }

  /** `kept` (a handle only the cache holds) is dormant from here: its block goes back to the pool. */
  #keepDormant(kept: ArrayBuffer, block: Block): void {
    block.slept = this.#marks;
    this.#append(block.address, -kept.byteLength);
    if (this.#shared) this.#native.settle();
    const handles = this.#dormant.get(block.address);
    const same = handles === undefined ? -1 : handles.findIndex((h) => h.byteLength === kept.byteLength);
    if (same >= 0) {
      handles![same] = kept; // the binding now names the newer one
      return;
    }
    if (handles === undefined) this.#dormant.set(block.address, [kept]);
    else handles.push(kept);
    this.#dormantCount++;
  }

  /** The dormant handle of (address, bytes), which the binding just woke: it leaves the cache. */
  #wake(address: number, bytes: number): ArrayBuffer {
    const handles = this.#dormant.get(address);
    const at = handles === undefined ? -1 : handles.findIndex((h) => h.byteLength === bytes);
    if (at < 0) throw new Error(`tensorpool: internal error: the binding woke a dormant handle of ${bytes} bytes at ${address} that the front cache does not hold`);
    const buffer = handles![at];
    // The address stays in the map (it will sleep here again): a delete and a set per cycle cost a rehash.
    handles![at] = handles![handles!.length - 1];
    handles!.pop();
    this.#dormantCount--;
    this.#woken++;
    return buffer;
  }

  /** Drops the dormant handles not handed out again for DORMANT_MARKS marks (all of them with `all`). */
  #dropDormant(all: boolean): void {
    if (all) {
      this.#dormant.clear();
      this.#dormantCount = 0;
      this.#native.forgetDormant();
      return;
    }
    for (const [address, handles] of this.#dormant) {
      for (let i = handles.length - 1; i >= 0; i--) {
        if (this.#marks - Tag.of(handles[i])!.slept < DORMANT_MARKS) continue;
        this.#native.forgetDormant(address, handles[i].byteLength);
        handles.splice(i, 1);
        this.#dormantCount--;
      }
      if (handles.length === 0) this.#dormant.delete(address);
    }
  }

  /** The iteration ended: gives back what it did not need (each size's low-water mark). */
  markIteration(): void {
    if (++this.#marks % DORMANT_MARKS === 0 && this.#dormantCount > 0) this.#dropDormant(false);
    if (this.#log[GENERATION] !== this.#generation) return this.#newGeneration();
    for (const [bytes, stack] of this.#stacks) {
      for (let n = stack.lowWater; n > 0; n--) this.#returnBuffer(stack.buffers.shift()!);
      stack.lowWater = stack.buffers.length;
      // Lengths come and go with input shapes: an empty stack is not kept.
      if (stack.buffers.length === 0) this.#stacks.delete(bytes);
    }
    this.#recountClasses();
  }

  /**
   * Other threads of the process allocate from this pool from now on: a block the cache gives back or a
   * release it keeps the handle of reaches the pool at once, not at this thread's next call into it.
   */
  share(): void {
    this.#shared = true;
  }

  /** Gives every buffer back (a new plan serving). */
  clear(): void {
    this.#giveBack(() => true);
  }

  /** Gives every buffer back and drops the dormant handles (close()). */
  close(): void {
    this.clear();
    if (this.#dormantCount > 0) this.#dropDormant(true);
  }

  stats(): FrontCacheStats {
    return {
      served: this.#served,
      taken: this.#taken,
      returned: this.#returned,
      buffers: this.#buffers,
      bytes: this.#bytes,
      slept: this.#slept,
      woken: this.#woken,
      dormant: this.#dormantCount,
    };
  }

  #newGeneration(): void {
    this.#generation = this.#log[GENERATION];
    this.clear();
  }

  #giveBack(which: (block: Block) => boolean): void {
    for (const stack of this.#stacks.values()) {
      const kept: ArrayBuffer[] = [];
      for (const buffer of stack.buffers) {
        if (which(Tag.of(buffer)!)) this.#returnBuffer(buffer); else kept.push(buffer);
      }
      if (kept.length === stack.buffers.length) continue;
      stack.buffers.splice(0, stack.buffers.length, ...kept);
      stack.lowWater = Math.min(stack.lowWater, kept.length);
    }
    this.#recountClasses();
  }

  /** A held block back to the native pool; its handle, the cache's own already, stays dormant where it may. */
  #returnBuffer(buffer: ArrayBuffer): void {
    this.#buffers--;
    this.#bytes -= buffer.byteLength;
    this.#returned++;
    if (this.#dormantCount < this.#maxDormant) this.#keepDormant(buffer, Tag.of(buffer)!);
    else this.#native.returnCached(buffer);
  }

  #recountClasses(): void {
    let bound = -1;
    for (const stack of this.#stacks.values()) {
      for (const buffer of stack.buffers) bound = Math.max(bound, Tag.of(buffer)!.classIndex);
    }
    this.#classBound = bound;
  }

  #append(address: number, bytes: number): void {
    const log = this.#log;
    let n = log[COUNT];
    if (n === FRONT_CACHE_LOG_ENTRIES) {
      this.#native.settle();
      n = 0;
    }
    log[ENTRIES + 2 * n] = address;
    log[ENTRIES + 2 * n + 1] = bytes;
    log[COUNT] = n + 1;
  }
}

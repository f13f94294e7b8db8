/**
 * Streams (S4): in-order queues of asynchronous work on a thread of their own. Native tasks (fill, copy,
 * axpy) run on pool buffers; a tracked promise holds back the work queued after it until it settles. An
 * event marks a point in a stream; `pool.release(buffer, { stream })` records one so that the block is
 * reused only after the stream has passed it.
 */
import { fromNative } from '../errors.js';
import { native, type NativeStream } from '../native.js';
import { checkBoolean, checkOptions, describe, invalidArgument } from '../validate.js';

/** A point in a stream: passed once the work queued before it has finished. */
export class StreamEvent {
  readonly #stream: Stream;
  /** The stream's sequence number this event waits for. */
  readonly sequence: number;

  /** The event `sequence` of `stream` (stream.record() makes them). */
  constructor(stream: Stream, sequence: number) {
    this.#stream = stream;
    this.sequence = sequence;
  }

  /** Whether the stream has passed this event (never blocks). */
  query(): boolean {
    return this.#stream.completed >= this.sequence;
  }

  /** Resolves once the stream has passed this event; never blocks the JS thread. */
  synchronize(): Promise<void> {
    return waitFor(this.#stream, this.sequence);
  }
}

const handles = new WeakMap<Stream, NativeStream>();
const waiters = new WeakMap<Stream, { sequence: number; resolve: () => void }[]>();

/** Internal: the native stream behind a Stream (not exported from the package). */
export function nativeStreamOf(stream: Stream): NativeStream {
  return handles.get(stream)!;
}

function waitFor(stream: Stream, sequence: number): Promise<void> {
  if (stream.completed >= sequence) return Promise.resolve();
  return new Promise((resolve) => {
    const list = waiters.get(stream)!;
    list.push({ sequence, resolve });
    handles.get(stream)!.watch(Math.min(...list.map((w) => w.sequence)));
  });
}

/** Called from the stream's thread (through the event loop) when a watched sequence number is reached. */
function progress(stream: Stream, completed: number): void {
  const list = waiters.get(stream)!;
  const ready = list.filter((w) => w.sequence <= completed);
  const rest = list.filter((w) => w.sequence > completed);
  waiters.set(stream, rest);
  handles.get(stream)!.watch(rest.length ? Math.min(...rest.map((w) => w.sequence)) : 0);
  for (const w of ready) w.resolve();
}

type PatternView =
  | Int8Array
  | Uint8Array
  | Uint8ClampedArray
  | Int16Array
  | Uint16Array
  | Int32Array
  | Uint32Array
  | Float32Array
  | Float64Array
  | BigInt64Array
  | BigUint64Array;

/** The bytes of `value` as one element of `view`'s type: [low 32 bits, high 32 bits, element size]. */
function pattern(view: PatternView, value: number | bigint): [number, number, number] {
  const size = view.BYTES_PER_ELEMENT;
  const scratch = new (view.constructor as new (n: number) => PatternView)(1);
  const wantsBigint = scratch instanceof BigInt64Array || scratch instanceof BigUint64Array;
  if (typeof value !== (wantsBigint ? 'bigint' : 'number')) {
    throw invalidArgument('type', `value must be a ${wantsBigint ? 'bigint' : 'number'} for a ${view.constructor.name}, got ${describe(value)}`);
  }
  (scratch as unknown as (number | bigint)[])[0] = value;
  const bytes = new Uint8Array(8);
  bytes.set(new Uint8Array(scratch.buffer, 0, size));
  const words = new Uint32Array(bytes.buffer);
  return [words[0], words[1], size];
}

function viewOf(value: unknown, name: string): ArrayBufferView {
  if (!ArrayBuffer.isView(value)) throw invalidArgument('type', `${name} must be a typed array over a pool buffer, got ${describe(value)}`);
  return value;
}

/**
 * An in-order queue of work on a native thread (fills, copies, axpy, host callbacks), with events to wait on;
 * a pool releases a block with `{ stream }` only once the work queued before has run.
 */
export class Stream {
  /** A stream with its own worker thread. */
  constructor() {
    handles.set(this, new native.NativeStream((completed: number) => progress(this, completed)));
    waiters.set(this, []);
  }

  /** Tasks queued so far; an event recorded now waits for this many to finish. */
  get recorded(): number {
    return nativeStreamOf(this).recorded();
  }
  /** Tasks finished so far, in order. */
  get completed(): number {
    return nativeStreamOf(this).completed();
  }

  /** Queues: every element of `view` set to `value` (typed by the view: Float32Array, Int32Array, ...). */
  fill(view: ArrayBufferView, value: number | bigint): this {
    const v = viewOf(view, 'view');
    if (v instanceof DataView) throw invalidArgument('type', 'view must be a typed array, not a DataView');
    const [low, high, size] = pattern(v as PatternView, value);
    this.#enqueue(() => nativeStreamOf(this).fill(v.buffer as ArrayBuffer, v.byteOffset, v.byteLength, low, high, size));
    return this;
  }

  /** Queues: `src`'s bytes copied into `dst` (which must be at least as long). */
  copy(dst: ArrayBufferView, src: ArrayBufferView): this {
    const d = viewOf(dst, 'dst');
    const s = viewOf(src, 'src');
    if (d.byteLength < s.byteLength) {
      throw invalidArgument('range', `dst holds ${d.byteLength} bytes, src has ${s.byteLength}`);
    }
    this.#enqueue(() => nativeStreamOf(this).copy(d.buffer as ArrayBuffer, d.byteOffset, s.buffer as ArrayBuffer, s.byteOffset, s.byteLength));
    return this;
  }

  /** Queues: y = a * x + y over Float32 data (x and y of the same length). */
  axpy(a: number, x: Float32Array, y: Float32Array): this {
    if (typeof a !== 'number') throw invalidArgument('type', `a must be a number, got ${describe(a)}`);
    if (!(x instanceof Float32Array) || !(y instanceof Float32Array)) throw invalidArgument('type', 'x and y must be Float32Arrays');
    if (x.length !== y.length) throw invalidArgument('range', `x has ${x.length} elements, y has ${y.length}`);
    this.#enqueue(() => nativeStreamOf(this).axpy(a, x.buffer as ArrayBuffer, x.byteOffset, y.buffer as ArrayBuffer, y.byteOffset, x.length));
    return this;
  }

  /**
   * Puts a promise in the stream's order: work queued after this runs only once the promise has settled
   * (resolved or rejected). Its outcome is not observed otherwise.
   */
  track(promise: PromiseLike<unknown>): this {
    if (!promise || typeof (promise as PromiseLike<unknown>).then !== 'function') {
      throw invalidArgument('type', `track() takes a promise, got ${describe(promise)}`);
    }
    let gate = 0;
    this.#enqueue(() => {
      gate = nativeStreamOf(this).waitGate()[1];
      return 0;
    });
    const open = () => nativeStreamOf(this).openGate(gate);
    // Promise.resolve takes the thenable's `then` in a job of its own: one that throws rejects, and still opens
    // the gate (called directly, it would throw here with the gate already queued and never opened).
    Promise.resolve(promise).then(open, open);
    return this;
  }

  /** An event at the current end of the stream. */
  record(): StreamEvent {
    return new StreamEvent(this, this.recorded);
  }

  /** Resolves once everything queued so far has finished. */
  synchronize(): Promise<void> {
    return this.record().synchronize();
  }

  /**
   * No more work. Without `cancel`, what is queued still runs and the promise resolves when it has; with
   * `cancel: true`, tasks not yet started are dropped (their events pass at once; a wait on a tracked
   * promise is released) and blocks released after them come back. Memory a task uses is never freed
   * under it either way. A Stream that is garbage-collected behaves as close() without cancel.
   */
  close(options?: { cancel?: boolean }): Promise<void> {
    const o = checkOptions<{ cancel?: boolean }>(options, 'options', ['cancel']);
    const cancel = o.cancel === undefined ? false : checkBoolean(o.cancel, 'options.cancel');
    const end = this.recorded;
    nativeStreamOf(this).close(cancel);
    return waitFor(this, end);
  }

  #enqueue(queue: () => number): void {
    try {
      queue();
    } catch (error) {
      throw fromNative(error);
    }
  }
}

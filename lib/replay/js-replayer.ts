/**
 * The replay loop of native/replay/replay.cc, in JavaScript through the public Pool API (allocator
 * `tensorpool-js`): every allocation is a `pool.alloc()` ArrayBuffer touched through a typed array, every
 * free a `pool.release()`. What a JS program pays per tensor (with the front cache on Node.js >= 22), next
 * to the native loop's cost of the same pool.
 */
import { native, type NativeFaultMeter, type NativeRepetition, type TouchMode } from '../native.js';
import type { Pool } from '../pool/pool.js';
import { EventOp, type Trace } from '../trace/trace.js';

const PAGE = 4096;

export class JsReplayer {
  readonly #pool: Pool;
  readonly #trace: Trace;
  readonly #touch: TouchMode;
  readonly #iterationMarks: boolean;
  readonly #meter: NativeFaultMeter = new native.NativeFaultMeter();
  readonly #buffers: (ArrayBuffer | undefined)[];

  #repetitions = 0;

  constructor(pool: Pool, trace: Trace, options: { touch: TouchMode; iterationMarks: boolean }) {
    this.#pool = pool;
    this.#trace = trace;
    this.#touch = options.touch;
    this.#iterationMarks = options.iterationMarks;
    this.#buffers = new Array<ArrayBuffer | undefined>(trace.bufferCount);
  }

  get faultSource(): 'perf_event' | 'getrusage' {
    return this.#meter.source;
  }

  /** One repetition, as NativeReplayer.run measures it. */
  run(timeOperations: boolean): NativeRepetition {
    const { ops, eventBuffer, sizes } = this.#trace;
    const pool = this.#pool;
    const buffers = this.#buffers;
    const r: NativeRepetition = { ns: 0, allocNs: 0, releaseNs: 0, allocs: 0, releases: 0, minorFaults: 0, majorFaults: 0, corruptions: 0 };
    const faultsBefore = this.#meter.read();
    const start = process.hrtime.bigint();
    // As the native loop: with the trace's marks, the first repetition starts at the trace's first iteration
    // (a mark before it would put the run one schedule ahead of a plan trained on the trace).
    if (!this.#iterationMarks || this.#repetitions > 0) pool.markIteration();
    for (let e = 0; e < ops.length; e++) {
      const op = ops[e];
      if (op === EventOp.Iteration) {
        if (this.#iterationMarks) pool.markIteration();
        continue;
      }
      const b = eventBuffer[e];
      if (op === EventOp.Alloc) {
        const t0 = timeOperations ? process.hrtime.bigint() : 0n;
        const buffer = pool.alloc(sizes[b]);
        if (timeOperations) r.allocNs += Number(process.hrtime.bigint() - t0);
        if (this.#touch === 'verify') this.#stamp(buffer, b, false);
        else this.#write(buffer, e & 0xff);
        buffers[b] = buffer;
        r.allocs++;
      } else {
        this.#release(b, r, timeOperations);
      }
    }
    // Start the next repetition empty, as the native loop does.
    for (let b = 0; b < buffers.length; b++) {
      if (buffers[b] !== undefined) this.#release(b, r, timeOperations);
    }
    this.#repetitions++;
    r.ns = Number(process.hrtime.bigint() - start);
    const faultsAfter = this.#meter.read();
    r.minorFaults = faultsAfter.minor - faultsBefore.minor;
    r.majorFaults = faultsAfter.major - faultsBefore.major;
    return r;
  }

  #release(b: number, r: NativeRepetition, timeOperations: boolean): void {
    const buffer = this.#buffers[b]!;
    if (this.#touch === 'verify' && !this.#stamp(buffer, b, true)) r.corruptions++;
    const t0 = timeOperations ? process.hrtime.bigint() : 0n;
    this.#pool.release(buffer);
    if (timeOperations) r.releaseNs += Number(process.hrtime.bigint() - t0);
    this.#buffers[b] = undefined;
    r.releases++;
  }

  // touch 'verify', as native/replay/replay.cc does it: writes (or, with `check`, checks) buffer b's stamp at the
  // start of every page and in its last 4 bytes (a page's stamp that would overlap those left out); answers
  // whether every place held it.
  #stamp(buffer: ArrayBuffer, b: number, check: boolean): boolean {
    const stamp = (Math.imul(b + 1, 2654435761) ^ Math.imul(this.#repetitions + 1, 40503)) >>> 0;
    if (buffer.byteLength < 4) {
      const bytes = new Uint8Array(buffer);
      if (check) return bytes[0] === (stamp & 0xff);
      bytes[0] = stamp;
      return true;
    }
    const view = new DataView(buffer);
    const last = buffer.byteLength - 4;
    for (let at = 0; at + 4 <= last; at += PAGE) {
      if (!check) view.setUint32(at, stamp, true);
      else if (view.getUint32(at, true) !== stamp) return false;
    }
    if (!check) view.setUint32(last, stamp, true);
    return !check || view.getUint32(last, true) === stamp;
  }

  #write(buffer: ArrayBuffer, value: number): void {
    if (this.#touch === 'none') return;
    const bytes = new Uint8Array(buffer);
    if (this.#touch === 'full') {
      bytes.fill(value);
      return;
    }
    for (let i = 0; i < bytes.length; i += PAGE) bytes[i] = value;
  }
}

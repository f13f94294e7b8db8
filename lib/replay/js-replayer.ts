/**
 * The replay loop of native/replay.cc, in JavaScript through the public Pool API (allocator
 * `tensorpool-js`): every allocation is a `pool.alloc()` ArrayBuffer touched through a typed array, every
 * free a `pool.release()`. What a JS program pays per tensor (with the front cache on Node.js >= 22), next
 * to the native loop's cost of the same pool.
 */
import { native, type NativeFaultMeter, type NativeRepetition } from '../native.js';
import type { Pool } from '../pool.js';
import { EventOp, type Trace } from '../trace/trace.js';

const PAGE = 4096;

export class JsReplayer {
  readonly #pool: Pool;
  readonly #trace: Trace;
  readonly #touch: 'none' | 'pages' | 'full';
  readonly #iterationMarks: boolean;
  readonly #meter: NativeFaultMeter = new native.NativeFaultMeter();
  readonly #buffers: (ArrayBuffer | undefined)[];

  constructor(pool: Pool, trace: Trace, options: { touch: 'none' | 'pages' | 'full'; iterationMarks: boolean }) {
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
    pool.markIteration();
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
        this.#write(buffer, e & 0xff);
        buffers[b] = buffer;
        r.allocs++;
      } else {
        const t0 = timeOperations ? process.hrtime.bigint() : 0n;
        pool.release(buffers[b]!);
        if (timeOperations) r.releaseNs += Number(process.hrtime.bigint() - t0);
        buffers[b] = undefined;
        r.releases++;
      }
    }
    // Start the next repetition empty, as the native loop does.
    for (let b = 0; b < buffers.length; b++) {
      const buffer = buffers[b];
      if (buffer === undefined) continue;
      pool.release(buffer);
      buffers[b] = undefined;
      r.releases++;
    }
    r.ns = Number(process.hrtime.bigint() - start);
    const faultsAfter = this.#meter.read();
    r.minorFaults = faultsAfter.minor - faultsBefore.minor;
    r.majorFaults = faultsAfter.major - faultsBefore.major;
    return r;
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

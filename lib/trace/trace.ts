/**
 * The trace model: a sequence of events (alloc, free, iteration mark), and the buffers they describe, each
 * with a size and a half-open lifetime [start, end) in *time*: the index of an event among the allocs and
 * frees (an iteration mark takes no time), as in the problems derived from shared/traces.
 */
import zlib from 'node:zlib';

import { writeFileAtomic } from '../io/files.js';
import { quantile } from '../report/stats.js';

/** A trace event's kind: an allocation, a free, or an iteration mark. */
export const EventOp = { Alloc: 0, Free: 1, Iteration: 2 } as const;
/** One of EventOp's values. */
export type EventOp = (typeof EventOp)[keyof typeof EventOp];

/** Where a trace came from: a file format, a recording, or the synthetic generator. */
export type TraceFormat = 'tensorpool-csv' | 'chrome-trace' | 'minimalloc-csv' | 'recorded' | 'synthetic';

/** Oddities a real tool's trace can contain. Each was handled as the comment says, and counted. */
export interface TraceAnomalies {
  /** A free of an address (id) never allocated in the trace: allocated before recording began. Dropped. */
  freeOfUnknown: number;
  /** An allocation at an address still live: the earlier buffer is treated as freed at that point. */
  allocAtLiveAddress: number;
  /** Events of 0 bytes. Dropped. */
  zeroByte: number;
  /** Events of another device than the CPU. Dropped. */
  otherDevice: number;
  /** Frees whose size differs from their allocation's. Kept, with the allocation's size. */
  sizeMismatchOnFree: number;
}

export function noAnomalies(): TraceAnomalies {
  return { freeOfUnknown: 0, allocAtLiveAddress: 0, zeroByte: 0, otherDevice: 0, sizeMismatchOnFree: 0 };
}

/** A trace's counts at a glance (Trace.summary()). */
export interface TraceSummary {
  name: string;
  format: TraceFormat;
  events: number;
  allocs: number;
  frees: number;
  iterations: number;
  buffers: number;
  neverFreed: number;
  bytesNeverFreed: number;
  distinctSizes: number;
  sizeQuantiles: { min: number; p25: number; median: number; p75: number; p90: number; p99: number; max: number };
  bytesAllocated: number;
  lowerBound: number;
  anomalies: TraceAnomalies;
}

/** Growable typed-array storage for the readers. */
class Column<T extends Float64Array | Int32Array | Uint8Array> {
  data: T;
  length = 0;
  constructor(private readonly make: (n: number) => T) {
    this.data = make(1024);
  }
  push(value: number): number {
    if (this.length === this.data.length) {
      const bigger = this.make(this.data.length * 2);
      bigger.set(this.data);
      this.data = bigger;
    }
    this.data[this.length] = value;
    return this.length++;
  }
  trimmed(): T {
    return this.data.slice(0, this.length) as T;
  }
}

/** Builds a Trace event by event. Readers own id bookkeeping and validation; this only records. */
export class TraceBuilder {
  readonly #ops = new Column((n) => new Uint8Array(n));
  readonly #eventBuffer = new Column((n) => new Int32Array(n));
  readonly #eventStream = new Column((n) => new Int32Array(n));
  readonly #sizes = new Column((n) => new Float64Array(n));
  readonly #starts = new Column((n) => new Float64Array(n));
  readonly #ends = new Column((n) => new Float64Array(n));
  readonly #iterationStarts: number[] = [0];
  #time = 0;

  /** Records an allocation; returns the new buffer's index. */
  alloc(size: number, stream: number): number {
    const buffer = this.#sizes.push(size);
    this.#starts.push(this.#time++);
    this.#ends.push(-1);
    this.#event(EventOp.Alloc, buffer, stream);
    return buffer;
  }

  /** Adds the free of `buffer` (an index alloc() returned) on `stream`. */
  free(buffer: number, stream: number): void {
    this.#ends.data[buffer] = this.#time++;
    this.#event(EventOp.Free, buffer, stream);
  }

  /** An iteration boundary: the next event starts a new iteration. */
  mark(): void {
    this.#event(EventOp.Iteration, -1, 0);
    this.#iterationStarts.push(this.#ops.length);
  }

  /** Events added so far. */
  get events(): number {
    return this.#ops.length;
  }

  #event(op: EventOp, buffer: number, stream: number): void {
    this.#ops.push(op);
    this.#eventBuffer.push(buffer);
    this.#eventStream.push(stream);
  }

  /**
   * The trace of the events added: buffers never freed live to its end, a trailing mark opens no iteration.
   */
  build(name: string, format: TraceFormat, anomalies: TraceAnomalies = noAnomalies(), program: string | null = null): Trace {
    const ends = this.#ends.trimmed();
    const eventCount = this.#ops.length;
    for (let b = 0; b < ends.length; b++) if (ends[b] < 0) ends[b] = this.#time;
    // A trailing mark opens no iteration.
    const iterationStarts = this.#iterationStarts.filter((start, i) => i === 0 || start < eventCount);
    return new Trace({
      name,
      format,
      ops: this.#ops.trimmed(),
      eventBuffer: this.#eventBuffer.trimmed(),
      eventStream: this.#eventStream.trimmed(),
      sizes: this.#sizes.trimmed(),
      starts: this.#starts.trimmed(),
      ends,
      iterationStarts,
      anomalies,
      duration: this.#time,
      program,
    });
  }
}

/** What a Trace is made of (TraceBuilder.build() assembles it). */
export interface TraceParts {
  name: string;
  format: TraceFormat;
  ops: Uint8Array;
  eventBuffer: Int32Array;
  eventStream: Int32Array;
  sizes: Float64Array;
  starts: Float64Array;
  ends: Float64Array;
  iterationStarts: number[];
  anomalies: TraceAnomalies;
  duration: number;
  program?: string | null;
}

/** The comment line of a trace CSV that names the program it was recorded from (Trace.program). */
export const PROGRAM_COMMENT = '# program: ';

/**
 * An allocation trace: events (allocations, frees, iteration marks) in order, and per buffer its size and
 * lifetime. Read with readTrace(), recorded by pool.record(), or generated by syntheticTrainingTrace().
 */
export class Trace {
  /** A name for reports: usually the file it was read from. */
  readonly name: string;
  readonly format: TraceFormat;
  /** Per event: EventOp. Time is the event index. */
  readonly ops: Uint8Array;
  /** Per event: the buffer allocated or freed (-1 for an iteration mark). */
  readonly eventBuffer: Int32Array;
  /** Per event: the stream it ran on (for a free: the stream the block was last used on). */
  readonly eventStream: Int32Array;
  /** Per buffer: size in bytes, and lifetime [start, end) in time (allocs and frees counted, marks not). */
  readonly sizes: Float64Array;
  readonly starts: Float64Array;
  /** End of the lifetime: the time of its free, or `duration` for a buffer never freed. */
  readonly ends: Float64Array;
  /** Allocs and frees in the trace: the time after the last event. */
  readonly duration: number;
  /** Event index at which each iteration starts (the first is 0). */
  readonly iterationStarts: readonly number[];
  readonly anomalies: TraceAnomalies;
  /**
   * The program a recording of the preload library came from (its `# program:` line: the executable's name
   * and its first argument that is not an option, such as "node app.js"), or null. A plan trained on it
   * says so (`source.program`), and under a launcher only that program's processes map the plan's arena.
   */
  readonly program: string | null;
  #lowerBound: number | undefined;

  /** A trace of these parts, as they are (TraceBuilder.build() makes them consistent). */
  constructor(parts: TraceParts) {
    this.name = parts.name;
    this.format = parts.format;
    this.ops = parts.ops;
    this.eventBuffer = parts.eventBuffer;
    this.eventStream = parts.eventStream;
    this.sizes = parts.sizes;
    this.starts = parts.starts;
    this.ends = parts.ends;
    this.iterationStarts = parts.iterationStarts;
    this.anomalies = parts.anomalies;
    this.duration = parts.duration;
    this.program = parts.program ?? null;
  }

  /** Events in the trace (allocations, frees and iteration marks). */
  get eventCount(): number {
    return this.ops.length;
  }
  /** Buffers (allocations) in the trace. */
  get bufferCount(): number {
    return this.sizes.length;
  }
  /** Iterations the trace marks (at least 1). */
  get iterations(): number {
    return this.iterationStarts.length;
  }
  /** Whether buffer b is freed within the trace. */
  freed(b: number): boolean {
    return this.ends[b] < this.duration;
  }
  /** Buffers still live at the end of the trace. */
  get neverFreed(): number {
    let n = 0;
    for (let b = 0; b < this.sizes.length; b++) if (!this.freed(b)) n++;
    return n;
  }

  /** Bytes live after each event. */
  liveBytes(): Float64Array {
    const live = new Float64Array(this.ops.length);
    let bytes = 0;
    for (let e = 0; e < this.ops.length; e++) {
      const op = this.ops[e];
      if (op === EventOp.Alloc) bytes += this.sizes[this.eventBuffer[e]];
      else if (op === EventOp.Free) bytes -= this.sizes[this.eventBuffer[e]];
      live[e] = bytes;
    }
    return live;
  }

  /** The lower bound on any plan for this trace: the most bytes live at once. */
  lowerBound(): number {
    if (this.#lowerBound === undefined) {
      let max = 0;
      for (const bytes of this.liveBytes()) if (bytes > max) max = bytes;
      this.#lowerBound = max;
    }
    return this.#lowerBound;
  }

  /** Counts of the trace: events, allocations, frees, bytes, the lower bound. */
  summary(): TraceSummary {
    let allocs = 0;
    let frees = 0;
    for (const op of this.ops) {
      if (op === EventOp.Alloc) allocs++;
      else if (op === EventOp.Free) frees++;
    }
    let bytesAllocated = 0;
    let bytesNeverFreed = 0;
    let neverFreed = 0;
    for (let b = 0; b < this.sizes.length; b++) {
      bytesAllocated += this.sizes[b];
      if (!this.freed(b)) {
        neverFreed++;
        bytesNeverFreed += this.sizes[b];
      }
    }
    const sorted = Float64Array.from(this.sizes).sort();
    const q = (p: number) => (sorted.length ? quantile(sorted as unknown as number[], p) : 0);
    return {
      name: this.name,
      format: this.format,
      events: this.ops.length,
      allocs,
      frees,
      iterations: this.iterations,
      buffers: this.sizes.length,
      neverFreed,
      bytesNeverFreed,
      distinctSizes: new Set(this.sizes).size,
      sizeQuantiles: { min: q(0), p25: q(0.25), median: q(0.5), p75: q(0.75), p90: q(0.9), p99: q(0.99), max: q(1) },
      bytesAllocated,
      lowerBound: this.lowerBound(),
      anomalies: { ...this.anomalies },
    };
  }

  /**
   * Iteration k (1-based) as a trace of its own: its allocations, and the frees of those; frees of buffers
   * allocated in earlier iterations are left out, and buffers still live at its end count as never freed.
   */
  iteration(k: number): Trace {
    if (!Number.isInteger(k) || k < 1 || k > this.iterations) {
      throw new RangeError(`iteration must be between 1 and ${this.iterations}, got ${k}`);
    }
    const from = this.iterationStarts[k - 1];
    const to = this.iterationEnd(k);
    const builder = new TraceBuilder();
    const mapped = new Map<number, number>();
    for (let e = from; e < to; e++) {
      const op = this.ops[e];
      const b = this.eventBuffer[e];
      if (op === EventOp.Alloc) mapped.set(b, builder.alloc(this.sizes[b], this.eventStream[e]));
      else if (op === EventOp.Free && mapped.has(b)) builder.free(mapped.get(b)!, this.eventStream[e]);
    }
    return builder.build(`${this.name}#${k}`, this.format, noAnomalies());
  }

  /** One past iteration k's last event (1-based; the mark that closes it excluded). */
  iterationEnd(k: number): number {
    return k < this.iterations ? this.iterationStarts[k] - 1 : this.ops.length;
  }

  /** Per iteration: how many buffers were allocated before it began (where its allocations start). */
  iterationFirstBuffers(): number[] {
    const firsts: number[] = [];
    let allocs = 0;
    let next = 0;
    for (let e = 0; e <= this.ops.length && next < this.iterationStarts.length; e++) {
      while (next < this.iterationStarts.length && this.iterationStarts[next] === e) {
        firsts.push(allocs);
        next++;
      }
      if (e < this.ops.length && this.ops[e] === EventOp.Alloc) allocs++;
    }
    return firsts;
  }

  /**
   * Several traces as one, one after another: each keeps its iterations, buffers it never frees are freed
   * where it ends (each trace is a pattern of its own, as the shapes of one model's inputs are), and
   * anomalies add up. The most bytes live at once is then the largest of theirs.
   */
  static concat(traces: readonly Trace[], name: string): Trace {
    const builder = new TraceBuilder();
    const anomalies = noAnomalies();
    traces.forEach((trace, i) => {
      if (i > 0) builder.mark();
      const mapped = new Int32Array(trace.bufferCount).fill(-1);
      for (let e = 0; e < trace.ops.length; e++) {
        const op = trace.ops[e];
        const b = trace.eventBuffer[e];
        if (op === EventOp.Alloc) mapped[b] = builder.alloc(trace.sizes[b], trace.eventStream[e]);
        else if (op === EventOp.Free) builder.free(mapped[b], trace.eventStream[e]);
        else builder.mark();
      }
      for (let b = 0; b < trace.bufferCount; b++) if (!trace.freed(b)) builder.free(mapped[b], 0);
      for (const key of Object.keys(anomalies) as (keyof TraceAnomalies)[]) anomalies[key] += trace.anomalies[key];
    });
    return builder.build(name, traces[0]?.format ?? 'tensorpool-csv', anomalies);
  }

  /** tensorpool's trace CSV (ids are buffer indices, unique within the trace). */
  toCsv(): string {
    const lines = this.program === null ? ['op,id,size,stream'] : [`${PROGRAM_COMMENT}${this.program}`, 'op,id,size,stream'];
    for (let e = 0; e < this.ops.length; e++) {
      const b = this.eventBuffer[e];
      const op = this.ops[e];
      if (op === EventOp.Alloc) lines.push(`a,${b},${this.sizes[b]},${this.eventStream[e]}`);
      else if (op === EventOp.Free) lines.push(`f,${b},,${this.eventStream[e]}`);
      else lines.push('i,,,');
    }
    return lines.join('\n') + '\n';
  }

  /** Writes toCsv(), gzipped when the path ends in .gz. */
  writeCsv(path: string): void {
    const text = this.toCsv();
    writeFileAtomic(path, path.endsWith('.gz') ? zlib.gzipSync(text) : text);
  }
}

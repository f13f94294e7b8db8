/**
 * Page-fault statistics, as counted by the kernel. A minor fault maps a page without I/O (the first touch
 * of fresh anonymous memory: what every `new Float32Array(n)` of a few MiB costs); a major fault reads a
 * page from disk.
 */
import { native, type MemoryUsage } from './native.js';
import { checkFunction, checkOneOf, checkOptions } from './validate.js';

/** Page faults: minor (a page mapped without I/O) and major (read from disk). */
export interface FaultCounts {
  minor: number;
  major: number;
}

/** measureFaults()'s answer: the faults `fn` took, where they were counted, and what `fn` returned. */
export interface FaultMeasurement<T> extends FaultCounts {
  /** Where the numbers come from: a perf_event software counter, or getrusage(2). */
  source: 'perf_event' | 'getrusage';
  /** Whose faults: the calling (JS) thread only, or every thread of the process. */
  scope: 'thread' | 'process';
  /** What `fn` returned (awaited, for an async fn). */
  result: T;
}

/** Options of measureFaults(). */
export interface MeasureOptions {
  /**
   * 'thread' (default): faults taken by the JS thread, from a perf_event counter where the kernel allows
   * it (perf_event_paranoid <= 2) and getrusage(RUSAGE_THREAD) otherwise; nothing else the process does
   * in the meantime counts. 'process': every thread (getrusage(RUSAGE_SELF)), V8's helper threads included.
   */
  scope?: 'thread' | 'process';
}

/** Page faults taken so far by the whole process (getrusage). */
export function faults(): FaultCounts {
  return native.processFaults();
}

interface Meter {
  read(): FaultCounts;
  source: 'perf_event' | 'getrusage';
}

function openMeter(scope: 'thread' | 'process'): Meter {
  if (scope === 'thread') return new native.NativeFaultMeter();
  return { read: () => native.processFaults(), source: 'getrusage' };
}

/**
 * Runs `fn` and returns the page faults taken while it ran. For an async `fn` the measurement ends when
 * its promise settles (and the returned value is a promise too); with scope 'thread', faults of other
 * work the event loop runs meanwhile on this thread count as well.
 */
export function measureFaults<T>(fn: () => Promise<T>, options?: MeasureOptions): Promise<FaultMeasurement<T>>;
export function measureFaults<T>(fn: () => T, options?: MeasureOptions): FaultMeasurement<T>;
export function measureFaults<T>(
  fn: () => T | Promise<T>,
  options?: MeasureOptions,
): FaultMeasurement<T> | Promise<FaultMeasurement<T>> {
  checkFunction(fn, 'fn');
  const o = checkOptions<MeasureOptions>(options, 'options', ['scope']);
  const scope = o.scope === undefined ? 'thread' : checkOneOf(o.scope, 'options.scope', ['thread', 'process'] as const);
  const meter = openMeter(scope);
  const start = meter.read();
  const finish = (result: T): FaultMeasurement<T> => {
    const end = meter.read();
    return { minor: end.minor - start.minor, major: end.major - start.major, source: meter.source, scope, result };
  };
  const result = fn();
  if (result instanceof Promise) return result.then(finish);
  return finish(result);
}

/**
 * Resident set size of the process now and its high-water mark, and the C library's heap (in use, and held
 * free: what a pool's RSS is not), in bytes.
 */
export function memoryUsage(): MemoryUsage {
  return native.memory();
}

/** Shared test helpers: a seeded random generator, block patterns, and running the CLI. */
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { expect } from 'vitest';

import type { Pool, Trace } from '../lib/index.js';
import { native } from '../lib/native.js';
import { EventOp } from '../lib/trace/trace.js';

const cli = path.resolve(__dirname, '../dist/cli/main.js');

/** A file under test/fixtures (the test data the repository carries: see test/fixtures/README.md). */
export function fixture(...parts: string[]): string {
  return path.resolve(__dirname, 'fixtures', ...parts);
}

/**
 * A file of one of the two real training traces (`resnet18_train`, `transformer_train`): its tensorpool CSV
 * is the package's bundled trace; the Chrome trace it came from, its problem CSV and stats are fixtures.
 */
export function traceFixture(name: string, file: 'trace.csv.gz' | 'trace.json.gz' | 'problem.csv.gz' | 'stats.json'): string {
  return file === 'trace.csv.gz' ? path.resolve(__dirname, '../traces', `${name}.csv.gz`) : fixture('traces', name, file);
}

/** Runs the compiled CLI (npm test builds dist/ first). */
export function run(...args: string[]) {
  return runWith({}, ...args);
}

/** run(), with `env` added to this process's environment. */
export function runWith(env: NodeJS.ProcessEnv, ...args: string[]) {
  const result = spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8', timeout: 600_000, env: { ...process.env, ...env } });
  return { code: result.status, stdout: result.stdout, stderr: result.stderr };
}

/** A user error: exit code 2, one clear line on stderr, no stack trace. */
export function expectUsageError(result: ReturnType<typeof run>, message: RegExp): void {
  expect(result.code).toBe(2);
  expect(result.stderr.trimEnd().split('\n')).toHaveLength(1);
  expect(result.stderr).toMatch(/^tensorpool: /);
  expect(result.stderr).toMatch(message);
  expect(result.stderr).not.toMatch(/\n\s+at /);
}

/** Whether the addon runs under AddressSanitizer (scripts/sanitize.sh preloads its runtime). */
export const underAsan = /libasan/.test(process.env.LD_PRELOAD ?? '');

/** `fn` throws an Error carrying `code`. */
export function expectCode(fn: () => unknown, code: string): void {
  let thrown: unknown;
  try {
    fn();
  } catch (error) {
    thrown = error;
  }
  expect(thrown, `expected an error with code ${code}`).toBeInstanceOf(Error);
  expect((thrown as { code?: string }).code).toBe(code);
}

/** xorshift128+ (32-bit halves): a small seeded generator, so every run draws the same sequence. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0 || 1;
  let b = (seed * 2654435761) >>> 0 || 2;
  let c = 0x9e3779b9;
  let d = 0x7f4a7c15;
  return () => {
    const t = a ^ (a << 11);
    a = b;
    b = c;
    c = d;
    d = (d ^ (d >>> 19) ^ (t ^ (t >>> 8))) >>> 0;
    return d / 4294967296;
  };
}

/** Sizes log-uniform between 1 byte and `max`. */
export function logUniformSize(random: () => number, max: number): number {
  return Math.max(1, Math.floor(Math.exp(random() * Math.log(max))));
}

/** The byte offsets a block's pattern covers: every byte up to 64 KiB, else both 256-byte edges and one byte per 64 KiB. */
function* patternOffsets(bytes: number): Generator<number> {
  if (bytes <= 65536) {
    for (let i = 0; i < bytes; i++) yield i;
    return;
  }
  for (let i = 0; i < 256; i++) {
    yield i;
    yield bytes - 1 - i;
  }
  for (let i = 256; i < bytes; i += 65536) yield i;
}

function patternByte(seed: number, i: number): number {
  return (Math.imul(seed, 0x9e3779b1) + Math.imul(i, 131)) >>> 24;
}

export function fillPattern(bytes: Uint8Array, seed: number): void {
  if (bytes.length <= 65536) {
    for (let i = 0; i < bytes.length; i++) bytes[i] = patternByte(seed, i);
    return;
  }
  for (const i of patternOffsets(bytes.length)) bytes[i] = patternByte(seed, i);
}

export function patternIntact(bytes: Uint8Array, seed: number): boolean {
  if (bytes.length <= 65536) {
    for (let i = 0; i < bytes.length; i++) if (bytes[i] !== patternByte(seed, i)) return false;
    return true;
  }
  for (const i of patternOffsets(bytes.length)) if (bytes[i] !== patternByte(seed, i)) return false;
  return true;
}

/** A block a test holds, with the pattern it was filled with. */
export interface ShadowBlock {
  buffer: ArrayBuffer;
  bytes: Uint8Array;
  seed: number;
  address: number;
}

/**
 * The blocks a test holds from a pool, checked as their user sees them: each new one of the size asked for,
 * 64-byte aligned, overlapping no block held, and filled with a pattern that must be intact when it is taken
 * back (the caller then releases it). A check that fails throws (an expect() a block, in loops of 100k
 * operations, took seconds of a loaded machine).
 */
export class ShadowBlocks {
  readonly held: ShadowBlock[] = [];
  readonly #ranges = new LiveRanges();

  add(buffer: ArrayBuffer, size: number, seed: number): void {
    if (buffer.byteLength !== size) throw new Error(`a block of ${buffer.byteLength} B where ${size} B were asked for`);
    const address = native.bufferAddress(buffer);
    if (address % 64 !== 0) throw new Error(`block at ${address} (${size} B) is not 64-byte aligned`);
    if (!this.#ranges.add(address, size)) throw new Error(`block at ${address} (${size} B) overlaps a live block`);
    const bytes = new Uint8Array(buffer);
    fillPattern(bytes, seed);
    this.held.push({ buffer, bytes, seed, address });
  }

  /** Takes block `i` out of the shadow, its pattern checked. */
  take(i: number): ShadowBlock {
    const block = this.held[i];
    if (!patternIntact(block.bytes, block.seed)) throw new Error(`block ${block.seed} was overwritten`);
    this.#ranges.remove(block.address);
    this.held[i] = this.held[this.held.length - 1];
    this.held.pop();
    return block;
  }
}

/** Address ranges of live blocks; add() is false when the new range overlaps a live one. */
export class LiveRanges {
  readonly #starts: number[] = [];
  readonly #ends = new Map<number, number>();

  add(start: number, bytes: number): boolean {
    const end = start + bytes;
    let lo = 0;
    let hi = this.#starts.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.#starts[mid] < start) lo = mid + 1;
      else hi = mid;
    }
    if (lo < this.#starts.length && this.#starts[lo] < end) return false;
    if (lo > 0 && this.#ends.get(this.#starts[lo - 1])! > start) return false;
    this.#starts.splice(lo, 0, start);
    this.#ends.set(start, end);
    return true;
  }

  remove(start: number): void {
    this.#starts.splice(this.#starts.indexOf(start), 1);
    this.#ends.delete(start);
  }
}

export interface RunTraceOptions {
  /** Call pool.markIteration() at every iteration mark of the trace (then onMark). Default false. */
  marks?: boolean;
  onMark?: () => void;
  /** Fill every block with a pattern when allocated and check it when released. Default false. */
  patterns?: boolean;
  /** Blocks live from an earlier run (by buffer index, of a trace with the same carry-over); updated. */
  live?: Map<number, ArrayBuffer>;
}

/**
 * Runs a trace's allocations and releases through a pool from JS, as a runtime would. Returns the blocks
 * still live (by buffer index). With `patterns`, a block whose contents changed while it was live fails
 * the test, naming the buffer.
 */
export function runTrace(pool: Pool, trace: Trace, options: RunTraceOptions = {}): Map<number, ArrayBuffer> {
  const live = options.live ?? new Map<number, ArrayBuffer>();
  for (let e = 0; e < trace.eventCount; e++) {
    const op = trace.ops[e];
    const b = trace.eventBuffer[e];
    if (op === EventOp.Alloc) {
      const buffer = pool.alloc(trace.sizes[b]);
      if (options.patterns) fillPattern(new Uint8Array(buffer), b);
      live.set(b, buffer);
    } else if (op === EventOp.Free) {
      const buffer = live.get(b)!;
      if (options.patterns && !patternIntact(new Uint8Array(buffer), b)) {
        throw new Error(`${trace.name}: buffer ${b} (${trace.sizes[b]} bytes) was overwritten while live`);
      }
      pool.release(buffer);
      live.delete(b);
    } else if (options.marks) {
      pool.markIteration();
      options.onMark?.();
    }
  }
  return live;
}

/**
 * Mutation fuzzing of the file readers (fast-check; property-based, not coverage-guided). Each reader
 * starts from real files of the repository's fixtures — tensorpool
 * CSV traces recorded from onnxruntime-node, torch.profiler Chrome JSON, MiniMalloc and idealloc CSV, and
 * plan / offset-plan JSON trained from those traces — and gets them back with a few mutations: bytes
 * replaced, inserted, deleted or duplicated, lines cut, tokens that readers trip over (huge and
 * non-finite numbers, quotes, brackets, separators), optionally gzipped. The property: every input ends
 * in a result or a TensorPoolError whose message names the file — never another exception.
 *
 * Used by test/readers.test.ts (a fixed seed and number of runs) and by test/fuzz/readers-main.ts
 * (`npm run fuzz`: a time budget, a fresh seed, and inputs grown to ~1 MB with a time limit per input).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';

import fc from 'fast-check';

import { OffsetPlan, Plan, TensorPoolError, readTrace, train } from '../../dist/index.js';
import { parseProblemCsv } from '../../dist/trace/problem.js';
import { parseTrace } from '../../dist/trace/read.js';

const fixtures = path.resolve(__dirname, '../fixtures');

export type ReaderName = 'tensorpool-csv' | 'chrome-json' | 'minimalloc-csv' | 'plan-json' | 'offset-plan-json';

interface Reader {
  bases: Buffer[];
  /** Reads `bytes` as the file `name` (written under `dir` when the reader takes a path). */
  read(bytes: Buffer, name: string, dir: string): unknown;
}

const gunzip = (file: string): Buffer => zlib.gunzipSync(fs.readFileSync(path.join(fixtures, file)));

function readersFromFixtures(): Record<ReaderName, Reader> {
  const ocr = ['ocr-320x320', 'ocr-736x1280'].map((s) => gunzip(`traces/ocr_det_infer/${s}.csv.gz`));
  const chrome = ['squeezenet_infer', 'transformer_infer'].map((s) => gunzip(`traces/torch_infer/${s}.json.gz`));
  const trace = readTrace(path.join(fixtures, 'traces/ocr_det_infer/ocr-320x320.csv.gz'));
  const plans = [train(trace, { share: false }), train(trace, { share: true }), train(trace, { serve: 'spans' })].map((p) => Buffer.from(JSON.stringify(p.toJSON())));
  const offsets = Buffer.from(JSON.stringify(OffsetPlan.fromTrace(trace).toJSON()));
  const viaFile = (parse: (file: string) => unknown) => (bytes: Buffer, name: string, dir: string) => {
    const file = path.join(dir, name);
    fs.writeFileSync(file, bytes);
    return parse(file);
  };
  return {
    'tensorpool-csv': { bases: ocr, read: (b, name) => parseTrace(b, name) },
    'chrome-json': { bases: chrome, read: (b, name) => parseTrace(b, name) },
    'minimalloc-csv': {
      bases: [fs.readFileSync(path.join(fixtures, 'minimalloc/A.1048576.csv')), fs.readFileSync(path.join(fixtures, 'idealloc/G_1.csv'))],
      read: (b, name) => (b.length % 2 === 0 ? parseProblemCsv(b, name) : parseTrace(b, name)),  // as a problem, and as a trace
    },
    'plan-json': { bases: plans, read: viaFile((f) => Plan.read(f)) },
    'offset-plan-json': { bases: [offsets], read: viaFile((f) => OffsetPlan.read(f)) },
  };
}

const TOKENS = [
  '\n', '\r\n', ',', ' ', '"', '{', '}', '[', ']', ':', '-', '.', '#', '\u0000', '\u00ff', '\ufeff',
  '0', '-1', '1e308', '1e309', '-0', 'NaN', 'Infinity', '0x10', '4294967296', '9007199254740993',
  '18446744073709551616', '1e-7', 'null', 'true', '[]', '{}', '""', '"ph":"i"', '"name":"[memory]"',
  '"Bytes":', '"Addr":', '"version":', '"classes":', '"layout":', '"schedule":', '"offsets":', 'alloc', 'free',
];

type Mutation =
  | { kind: 'replace'; at: number; byte: number }
  | { kind: 'insert'; at: number; token: string }
  | { kind: 'delete'; at: number; length: number }
  | { kind: 'duplicate'; at: number; length: number }
  | { kind: 'truncate'; at: number };

const mutationArb: fc.Arbitrary<Mutation> = fc.oneof(
  fc.record({ kind: fc.constant('replace' as const), at: fc.nat(), byte: fc.integer({ min: 0, max: 255 }) }),
  fc.record({ kind: fc.constant('insert' as const), at: fc.nat(), token: fc.constantFrom(...TOKENS) }),
  fc.record({ kind: fc.constant('delete' as const), at: fc.nat(), length: fc.integer({ min: 1, max: 64 }) }),
  fc.record({ kind: fc.constant('duplicate' as const), at: fc.nat(), length: fc.integer({ min: 1, max: 256 }) }),
  fc.record({ kind: fc.constant('truncate' as const), at: fc.nat() }),
);

function mutate(base: Buffer, mutations: Mutation[]): Buffer {
  let bytes = base;
  for (const m of mutations) {
    const at = bytes.length === 0 ? 0 : m.at % bytes.length;
    switch (m.kind) {
      case 'replace':
        if (bytes.length > 0) {
          bytes = Buffer.from(bytes);
          bytes[at] = m.byte;
        }
        break;
      case 'insert':
        bytes = Buffer.concat([bytes.subarray(0, at), Buffer.from(m.token, 'latin1'), bytes.subarray(at)]);
        break;
      case 'delete':
        bytes = Buffer.concat([bytes.subarray(0, at), bytes.subarray(at + m.length)]);
        break;
      case 'duplicate':
        bytes = Buffer.concat([bytes.subarray(0, at + m.length), bytes.subarray(at)]);
        break;
      case 'truncate':
        bytes = bytes.subarray(0, at);
        break;
    }
  }
  return bytes;
}

/**
 * The file grown to about `bytes`, still well-formed: a JSON file's longest array (traceEvents, a plan's
 * schedule) repeated, a CSV file's body (after its first line) repeated.
 */
function grow(base: Buffer, bytes: number): Buffer {
  let json: unknown;
  try {
    json = JSON.parse(base.toString('utf8'));
  } catch {
    json = undefined;
  }
  if (json && typeof json === 'object') {
    const record = json as Record<string, unknown>;
    const key = Object.keys(record).filter((k) => Array.isArray(record[k])).sort((a, b) => (record[b] as unknown[]).length - (record[a] as unknown[]).length)[0];
    if (key !== undefined && (record[key] as unknown[]).length > 0) {
      const items = record[key] as unknown[];
      const copies = Math.max(1, Math.ceil(bytes / base.length));
      return Buffer.from(JSON.stringify({ ...record, [key]: Array.from({ length: items.length * copies }, (_, i) => items[i % items.length]) }));
    }
  }
  const firstLine = base.indexOf(10) + 1;
  const parts = [base];
  let total = base.length;
  while (total < bytes && base.length > firstLine) {
    parts.push(base.subarray(firstLine));
    total += base.length - firstLine;
  }
  return Buffer.concat(parts);
}

export interface ReaderFuzzOptions {
  seed: number;
  /** Runs per reader; with `seconds`, the time budget per reader ends it instead. */
  runs?: number;
  seconds?: number;
  /** Grow each base to about this many bytes before mutating (the time-per-input check). */
  growTo?: number;
  /** Fail an input that takes longer than this (ms). */
  maxMs?: number;
}

export interface ReaderFuzzResult {
  reader: ReaderName;
  runs: number;
  parsed: number;
  rejected: number;
  slowestMs: number;
  failure?: string;
}

export function fuzzReaders(options: ReaderFuzzOptions): ReaderFuzzResult[] {
  const readers = readersFromFixtures();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-fuzz-readers-'));
  const results: ReaderFuzzResult[] = [];
  try {
    for (const [name, reader] of Object.entries(readers) as [ReaderName, Reader][]) {
      const bases = options.growTo ? reader.bases.map((b) => grow(b, options.growTo!)) : reader.bases;
      const result: ReaderFuzzResult = { reader: name, runs: 0, parsed: 0, rejected: 0, slowestMs: 0 };
      const input = fc.record({
        base: fc.nat({ max: bases.length - 1 }),
        mutations: fc.array(mutationArb, { minLength: 1, maxLength: 6 }),
        gzip: fc.boolean(),
      });
      const property = fc.property(input, ({ base, mutations, gzip }) => {
        let bytes = mutate(bases[base], mutations);
        if (gzip) bytes = zlib.gzipSync(bytes, { level: 1 });
        const file = `fuzz-${name}-${result.runs}${name.endsWith('json') ? '.json' : '.csv'}${gzip ? '.gz' : ''}`;
        result.runs++;
        const started = performance.now();
        let outcome: 'parsed' | 'rejected';
        try {
          reader.read(bytes, file, dir);
          outcome = 'parsed';
        } catch (error) {
          if (!(error instanceof TensorPoolError)) throw new Error(`${file}: not a TensorPoolError: ${(error as Error)?.stack ?? String(error)}`);
          if (!error.message.includes(file)) throw new Error(`${file}: the error does not name the file: ${error.message}`);
          outcome = 'rejected';
        } finally {
          fs.rmSync(path.join(dir, file), { force: true });
        }
        const ms = performance.now() - started;
        result.slowestMs = Math.max(result.slowestMs, ms);
        if (options.maxMs !== undefined && ms > options.maxMs) throw new Error(`${file}: ${bytes.length} bytes took ${ms.toFixed(0)} ms`);
        result[outcome]++;
      });
      const details = fc.check(property, {
        seed: options.seed,
        numRuns: options.seconds ? Number.MAX_SAFE_INTEGER : (options.runs ?? 200),
        interruptAfterTimeLimit: options.seconds ? options.seconds * 1000 : undefined,
        endOnFailure: true,
      });
      if (details.failed) {
        const error = details.errorInstance as Error | undefined;
        result.failure = `${error?.message ?? 'failed'} (seed ${details.seed}, path ${details.counterexamplePath})`;
      }
      results.push(result);
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
  return results;
}

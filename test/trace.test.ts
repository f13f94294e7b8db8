import { describe, expect, it } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';

import { TensorPoolError, parseTrace, problemFromTrace, readProblem, readTrace, repeatIteration, syntheticTrainingTrace } from '../lib/index.js';
import { EventOp } from '../lib/trace/trace.js';
import { expectCode, fixture, traceFixture } from './helpers.js';

const TRACES = ['resnet18_train', 'transformer_train'];
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-trace-'));

function write(name: string, content: string | Buffer): string {
  const file = path.join(tmp, name);
  fs.writeFileSync(file, content);
  return file;
}

function errorOf(fn: () => unknown): TensorPoolError {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(TensorPoolError);
    expect((error as TensorPoolError).code).toBe('ERR_TP_BAD_TRACE');
    return error as TensorPoolError;
  }
  throw new Error('expected the reader to throw');
}

describe.each(TRACES)('shared trace %s', (name) => {
  const stats = JSON.parse(fs.readFileSync(traceFixture(name, 'stats.json'), 'utf8'));
  const csv = readTrace(traceFixture(name, 'trace.csv.gz'));
  const chrome = readTrace(traceFixture(name, 'trace.json.gz'));

  it('reads the CSV with the figures the capture recorded', () => {
    const s = csv.summary();
    expect(s.format).toBe('tensorpool-csv');
    expect(s.allocs).toBe(stats.allocs);
    expect(s.frees).toBe(stats.frees);
    expect(s.events).toBe(stats.events + stats.iterations - 1); // plus the iteration marks
    expect(s.iterations).toBe(stats.iterations);
    expect(s.buffers).toBe(stats.buffers);
    expect(s.neverFreed).toBe(stats.buffers_never_freed);
    expect(s.bytesNeverFreed).toBe(stats.bytes_never_freed);
    expect(s.distinctSizes).toBe(stats.distinct_sizes);
    expect(s.sizeQuantiles.min).toBe(stats.size_min);
    expect(s.sizeQuantiles.max).toBe(stats.size_max);
    expect(s.bytesAllocated).toBe(stats.total_bytes_allocated);
    expect(s.lowerBound).toBe(stats.peak_live_bytes);
  });

  it('reads the torch.profiler Chrome trace into the same events', () => {
    expect(chrome.format).toBe('chrome-trace');
    expect(chrome.summary().anomalies).toEqual(csv.summary().anomalies);
    expect(Array.from(chrome.ops)).toEqual(Array.from(csv.ops));
    expect(Array.from(chrome.eventBuffer)).toEqual(Array.from(csv.eventBuffer));
    expect(Array.from(chrome.sizes)).toEqual(Array.from(csv.sizes));
    expect(chrome.iterationStarts).toEqual(csv.iterationStarts);
  });

  it('splits iterations as the profiler steps did', () => {
    const first = csv.iteration(1).summary();
    expect(first.events).toBe(stats.per_iteration[0].events);
    expect(first.allocs).toBe(stats.per_iteration[0].allocs);
    expect(first.frees).toBe(stats.per_iteration[0].frees);
    expect(first.bytesAllocated).toBe(stats.per_iteration[0].bytes_allocated);
    expect(first.lowerBound).toBe(stats.per_iteration[0].peak_live_bytes);
    expect(csv.iteration(2).summary().allocs).toBe(stats.per_iteration[1].allocs);
    expect(() => csv.iteration(3)).toThrow(RangeError);
  });

  it('reproduces the shared problem CSV from the trace (time = row index)', () => {
    const problem = readProblem(traceFixture(name, 'problem.csv.gz'));
    const derived = problemFromTrace(csv, { neverFreed: 'exclude' });
    expect(Array.from(derived.lower)).toEqual(Array.from(problem.lower));
    expect(Array.from(derived.upper)).toEqual(Array.from(problem.upper));
    expect(Array.from(derived.size)).toEqual(Array.from(problem.size));
    expect(readTrace(traceFixture(name, 'problem.csv.gz')).lowerBound()).toBe(stats.problem_peak_live_bytes);
  });

  it('writes tensorpool CSV that reads back identically, plain and gzip', () => {
    for (const file of [path.join(tmp, `${name}.csv`), path.join(tmp, `${name}.csv.gz`)]) {
      csv.writeCsv(file);
      const back = readTrace(file);
      expect(Array.from(back.ops)).toEqual(Array.from(csv.ops));
      expect(Array.from(back.sizes)).toEqual(Array.from(csv.sizes));
      expect(back.lowerBound()).toBe(csv.lowerBound());
    }
  });
});

describe('format detection and MiniMalloc problems', () => {
  it('detects formats from content, not names, and accepts comments, CRLF and a byte-order mark', () => {
    const csvText = '# a comment\r\nop,id,size,stream\r\na,1,100,0\r\nf,1,,0\r\n';
    expect(readTrace(write('a.json', csvText)).format).toBe('tensorpool-csv');
    expect(readTrace(write('b.txt', zlib.gzipSync('\ufeff' + csvText))).bufferCount).toBe(1);
    const problem = readTrace(write('c.csv', 'id,lower,upper,size,alignment\nx,0,2,10,64\ny,2,4,20,64\n'));
    expect(problem.format).toBe('minimalloc-csv');
    expect(problem.lowerBound()).toBe(20); // half-open: x ends at 2 where y starts
  });

  it('reads MiniMalloc problems: half-open lifetimes, inclusive `end`, extra columns, offsets', () => {
    const p = readProblem(write('p.csv', 'id,start,end,size,offset\na,0,1,8,0\nb,2,3,8,8\n'));
    expect(Array.from(p.upper)).toEqual([2, 4]); // inclusive end + 1
    expect(Array.from(p.offsets!)).toEqual([0, 8]);
    expect(p.columns).toEqual(['id', 'start', 'end', 'size', 'offset']);
    const challenging = readProblem(fixture('minimalloc/A.1048576.csv'));
    expect(challenging.size.length).toBe(154);
  });

  it('builds a trace from a synthetic training loop with repeating iterations', () => {
    const trace = syntheticTrainingTrace({ layers: 8, iterations: 3 });
    expect(trace.iterations).toBe(3);
    const [a, b] = [trace.iteration(2).summary(), trace.iteration(3).summary()];
    expect(a.allocs).toBe(b.allocs);
    expect(a.lowerBound).toBe(b.lowerBound);
    expect(trace.neverFreed).toBe(0);
  });
});

describe('bad input: a clear error naming file, line and field; never a crash', () => {
  const csvCases: [string, string, RegExp][] = [
    ['header', 'op,id,bytes,stream\na,1,10,0\n', /:1: unrecognised format: expected a tensorpool trace CSV \(header "op,id,size,stream"\)/],
    ['header after comments', '# x\n\nop,id,size\n', /:3: unrecognised format/],
    ['fields', 'op,id,size,stream\na,1,10\n', /:2: expected 4 fields/],
    ['op', 'op,id,size,stream\nx,1,10,0\n', /:2: field "op": must be 'a'/],
    ['id', 'op,id,size,stream\na,one,10,0\n', /:2: field "id": must be a non-negative integer, got "one"/],
    ['negative size', 'op,id,size,stream\na,1,-10,0\n', /:2: field "size": must be a positive integer, got "-10"/],
    ['zero size', 'op,id,size,stream\na,1,0,0\n', /:2: field "size": must be a positive integer/],
    ['decimal size', 'op,id,size,stream\na,1,1.5,0\n', /:2: field "size": must be a positive integer, got "1.5"/],
    ['missing size', 'op,id,size,stream\na,1,,0\n', /:2: field "size": is required/],
    ['stream', 'op,id,size,stream\na,1,10,x\n', /:2: field "stream"/],
    ['unknown free', 'op,id,size,stream\na,1,10,0\nf,2,,0\n', /:3: field "id": free of id 2, which is not live/],
    ['double free', 'op,id,size,stream\na,1,10,0\nf,1,,0\nf,1,,0\n', /:4: field "id": free of id 1/],
    ['reuse while live', 'op,id,size,stream\na,1,10,0\na,1,20,0\n', /:3: field "id": id 1 is already live/],
    ['size on free', 'op,id,size,stream\na,1,10,0\nf,1,10,0\n', /:3: field "size": must be empty on a free row/],
    ['iteration row', 'op,id,size,stream\ni,1,,\n', /:2: field "id": must be empty on an iteration row/],
    ['truncated row', 'op,id,size,stream\na,1,10,0\nf,1', /:3: expected 4 fields/],
    ['empty', '', /empty file/],
    ['only comments', '# nothing\n# here\n', /only comments/],
    ['unknown format', 'hello,world\n1,2\n', /unrecognised format/],
  ];
  const chromeCases: [string, string, RegExp][] = [
    ['invalid JSON', '{"traceEvents": [\n  {"name": "[memory]",, }\n]}', /at 2:\d+: not valid JSON/],
    ['truncated JSON', '{"traceEvents": [{"name": "[memory]"', /not valid JSON/],
    ['not a Chrome trace', '{"hello": "world"}', /not a Chrome trace/],
    ['traceEvents not an array', '{"traceEvents": 5}', /not a Chrome trace/],
    ['event not an object', '{"traceEvents": [5]}', /traceEvents\[0\]: an event must be an object/],
    ['missing Addr', '{"traceEvents": [{"name":"[memory]","ph":"i","ts":1,"args":{"Bytes":8}}]}', /traceEvents\[0\]: field "args.Addr": must be an integer/],
    ['fractional Bytes', '{"traceEvents": [{"name":"[memory]","ph":"i","ts":1,"args":{"Addr":1,"Bytes":1.5}}]}', /field "args.Bytes"/],
    ['no args', '{"traceEvents": [{"name":"[memory]","ph":"i","ts":1}]}', /field "args": must be an object/],
    ['bad ts', '{"traceEvents": [{"name":"[memory]","ph":"i","ts":"x","args":{}}]}', /field "ts": must be a number/],
    ['no memory events', '{"traceEvents": [{"name":"aten::add","ph":"X","ts":1}]}', /no "\[memory\]" events/],
  ];
  const problemCases: [string, string, RegExp][] = [
    ['inverted lifetime', 'id,lower,upper,size\na,5,3,10\n', /:2: field "upper": the lifetime \[5, 3\) is empty or inverted/],
    ['empty lifetime', 'id,lower,upper,size\na,5,5,10\n', /:2: field "upper": the lifetime \[5, 5\)/],
    ['negative size', 'id,lower,upper,size\na,0,1,-4\n', /:2: field "size": must be a positive integer, got "-4"/],
    ['non-numeric lower', 'id,lower,upper,size\na,x,1,4\n', /:2: field "lower": must be a non-negative integer, got "x"/],
    ['duplicate id', 'id,lower,upper,size\na,0,1,4\na,1,2,4\n', /:3: field "id": "a" appears twice/],
    ['row length', 'id,lower,upper,size\na,0,1\n', /:2: expected 4 fields, got 3/],
  ];
  const allCases = [
    ...csvCases.map(([label, content, message]) => ['trace CSV', label, content, message, readTrace] as const),
    ...chromeCases.map(([label, content, message]) => ['Chrome trace', label, content, message, readTrace] as const),
    ...problemCases.map(([label, content, message]) => ['MiniMalloc CSV', label, content, message, readProblem] as const),
  ];
  it.each(allCases)('%s: %s', (kind, label, content, message, reader) => {
    const file = write(`bad-${kind}-${label}.txt`.replace(/ /g, '-'), content);
    const error = errorOf(() => reader(file));
    expect(error.message).toContain(file);
    expect(error.message).toMatch(message);
  });

  it('truncated gzip, missing file, a directory', () => {
    const gz = zlib.gzipSync(fs.readFileSync(traceFixture('resnet18_train', 'trace.json.gz')));
    expect(errorOf(() => readTrace(write('cut.json.gz', gz.subarray(0, gz.length >> 1)))).message).toMatch(/not a valid gzip stream/);
    expect(errorOf(() => readTrace(path.join(tmp, 'missing.csv'))).message).toMatch(/no such file/);
    expect(errorOf(() => readTrace(tmp)).message).toMatch(/is a directory/);
  });

  it('bounds what it reads: a gzip that inflates past 2 GiB is refused, and a path must be a string', () => {
    // Gzip members concatenate: 33 copies of 64 MiB of zeros inflate to 2.06 GiB from 2 MB of file.
    const member = zlib.gzipSync(Buffer.alloc(64 << 20), { level: 9 });
    const bomb = Buffer.concat(Array.from({ length: 33 }, () => member));
    expect(errorOf(() => readTrace(write('bomb.csv.gz', bomb))).message).toMatch(/bomb\.csv\.gz: the input inflates to more than 2 GiB/);
    for (const notAPath of [42, '', null]) expectCode(() => readTrace(notAPath as never), 'ERR_TP_INVALID_ARGUMENT');
  });

  it('generators validate their options and bound their size', () => {
    expectCode(() => syntheticTrainingTrace({ layers: 1e9, iterations: 1e9 }), 'ERR_TP_INVALID_ARGUMENT');
    expectCode(() => syntheticTrainingTrace({ layers: -1 }), 'ERR_TP_INVALID_ARGUMENT');
    expectCode(() => syntheticTrainingTrace({ batchScale: 0 }), 'ERR_TP_INVALID_ARGUMENT');
    expectCode(() => syntheticTrainingTrace({ colour: 'red' } as never), 'ERR_TP_INVALID_ARGUMENT');
    const small = syntheticTrainingTrace({ layers: 2, iterations: 2 });
    expectCode(() => repeatIteration(small, 1, 1e12), 'ERR_TP_INVALID_ARGUMENT');
    expectCode(() => repeatIteration(small, 3, 1), 'ERR_TP_INVALID_ARGUMENT');
    expectCode(() => repeatIteration(42 as never, 1, 1), 'ERR_TP_INVALID_ARGUMENT');
  });

  it('every truncation of a real trace fails cleanly or parses a prefix', () => {
    const text = zlib.gunzipSync(fs.readFileSync(traceFixture('transformer_train', 'trace.csv.gz')));
    for (const cut of [1, 10, 17, 18, 19, 500, 5001, text.length - 3]) {
      try {
        const trace = parseTrace(text.subarray(0, cut), 'cut.csv');
        expect(trace.eventCount).toBeGreaterThanOrEqual(0);
      } catch (error) {
        expect((error as TensorPoolError).code).toBe('ERR_TP_BAD_TRACE');
      }
    }
  });
});

describe('Chrome trace anomalies a real profiler window produces are counted, not hidden', () => {
  it('counts pre-window frees, reused live addresses, 0-byte events, other devices and size mismatches', () => {
    const memory = (ts: number, addr: number, bytes: number, device = 0) => ({
      name: '[memory]',
      ph: 'i',
      ts,
      args: { Addr: addr, Bytes: bytes, 'Device Type': device, 'Device Id': -1 },
    });
    const events = [
      { name: 'ProfilerStep#1', ph: 'X', ts: 0, dur: 10 },
      { name: 'ProfilerStep#2', ph: 'X', ts: 10, dur: 10 },
      memory(1, 100, -64), // freed before it was allocated in the window
      memory(2, 200, 32),
      memory(3, 200, 48), // the address is live: the 32 is taken as freed here
      memory(4, 300, 0), // zero bytes
      memory(5, 400, 16, 1), // another device
      memory(11, 200, -40), // size differs from the 48 allocated
    ];
    const trace = readTrace(write('anomalies.json', JSON.stringify({ traceEvents: events })));
    expect(trace.anomalies).toEqual({ freeOfUnknown: 1, allocAtLiveAddress: 1, zeroByte: 1, otherDevice: 1, sizeMismatchOnFree: 1 });
    expect(trace.bufferCount).toBe(2);
    expect(trace.iterations).toBe(2);
    expect(Array.from(trace.ops)).toEqual([EventOp.Alloc, EventOp.Free, EventOp.Alloc, EventOp.Iteration, EventOp.Free]);
  });
});

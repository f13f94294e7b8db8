/**
 * torch.profiler Chrome traces (`trace.json[.gz]`, profile_memory=True). Memory events are objects with
 * `"name": "[memory]"`, `"ph": "i"`, `ts` in µs and `args` { Addr, Bytes (negative on free), Device Type
 * (0 = CPU), Device Id, ... }. Frees are matched to allocations by address (addresses are reused after a
 * free); events are taken in `ts` order (stable); `ProfilerStep#N` annotations mark iterations.
 *
 * A profiler window starts and stops mid-run, so some oddities are real and are accepted, counted in
 * `trace.anomalies`: frees of addresses allocated before the window (dropped), allocations at an address
 * still live (the earlier buffer is taken as freed there), 0-byte events and other devices (dropped).
 */
import { constants as bufferConstants } from 'node:buffer';
import { traceError } from './input.js';
import { Trace, TraceBuilder, noAnomalies } from './trace.js';
import { describe } from '../validate.js';

interface MemoryEvent {
  ts: number;
  addr: number;
  bytes: number;
  device: number;
}

/** Line and column (1-based) of a character offset. */
function lineAndColumn(text: string, position: number): string {
  let line = 1;
  let lineStart = 0;
  for (let i = 0; i < position && i < text.length; i++) {
    if (text.charCodeAt(i) === 10) {
      line++;
      lineStart = i + 1;
    }
  }
  return `${line}:${position - lineStart + 1}`;
}

export function parseJson(text: string, name: string): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    const message = (error as Error).message;
    const match = /position (\d+)/.exec(message);
    const position = match ? Number(match[1]) : text.length;
    throw traceError(name, lineAndColumn(text, position), null, `not valid JSON (${message})`);
  }
}

export function parseChromeTrace(bytes: Buffer, name: string): Trace {
  // JSON.parse takes one string, and V8 caps a string's length (2^29 - 24 characters on 64-bit Node).
  if (bytes.length > bufferConstants.MAX_STRING_LENGTH) {
    throw traceError(name, null, null, `a Chrome trace of ${bytes.length} bytes is larger than this reader takes (${bufferConstants.MAX_STRING_LENGTH} bytes, V8's longest string): convert it to tensorpool CSV in parts, or capture fewer steps`);
  }
  const text = bytes.toString('utf8');
  const json = parseJson(text, name);
  const events = Array.isArray(json) ? json : (json as { traceEvents?: unknown } | null)?.traceEvents;
  if (!Array.isArray(events)) {
    throw traceError(name, null, null, 'not a Chrome trace: a JSON object with a "traceEvents" array (or a bare array of events) was expected');
  }

  const memory: MemoryEvent[] = [];
  const steps: number[] = [];
  for (let i = 0; i < events.length; i++) {
    const e = events[i] as Record<string, unknown> | null;
    const at = `traceEvents[${i}]`;
    if (e === null || typeof e !== 'object' || Array.isArray(e)) {
      throw traceError(name, at, null, `an event must be an object, got ${describe(e)}`);
    }
    if (e.name === '[memory]' && e.ph === 'i') {
      memory.push(readMemoryEvent(e, at, name));
    } else if (typeof e.name === 'string' && /^ProfilerStep#\d+$/.test(e.name)) {
      if (typeof e.ts !== 'number' || !Number.isFinite(e.ts)) {
        throw traceError(name, at, 'ts', `must be a number, got ${describe(e.ts)}`);
      }
      steps.push(e.ts);
    }
  }
  if (memory.length === 0) {
    throw traceError(name, null, null, 'no "[memory]" events: record with torch.profiler.profile(profile_memory=True)');
  }
  memory.sort((a, b) => a.ts - b.ts); // stable
  steps.sort((a, b) => a - b);

  const builder = new TraceBuilder();
  const anomalies = noAnomalies();
  const live = new Map<number, number>(); // address -> buffer
  const sizeOf = new Map<number, number>(); // buffer -> bytes
  let nextStep = 1; // events before the first step belong to the first iteration
  for (const m of memory) {
    while (nextStep < steps.length && m.ts >= steps[nextStep]) {
      builder.mark();
      nextStep++;
    }
    if (m.device !== 0) {
      anomalies.otherDevice++;
    } else if (m.bytes === 0) {
      anomalies.zeroByte++;
    } else if (m.bytes > 0) {
      const previous = live.get(m.addr);
      if (previous !== undefined) {
        anomalies.allocAtLiveAddress++;
        builder.free(previous, 0);
      }
      const buffer = builder.alloc(m.bytes, 0);
      live.set(m.addr, buffer);
      sizeOf.set(buffer, m.bytes);
    } else {
      const buffer = live.get(m.addr);
      if (buffer === undefined) {
        anomalies.freeOfUnknown++;
        continue;
      }
      if (sizeOf.get(buffer) !== -m.bytes) anomalies.sizeMismatchOnFree++;
      live.delete(m.addr);
      sizeOf.delete(buffer);
      builder.free(buffer, 0);
    }
  }
  return builder.build(name, 'chrome-trace', anomalies);
}

function readMemoryEvent(e: Record<string, unknown>, at: string, name: string): MemoryEvent {
  if (typeof e.ts !== 'number' || !Number.isFinite(e.ts)) {
    throw traceError(name, at, 'ts', `must be a number, got ${describe(e.ts)}`);
  }
  const args = e.args as Record<string, unknown> | undefined;
  if (args === null || typeof args !== 'object' || Array.isArray(args)) {
    throw traceError(name, at, 'args', `must be an object, got ${describe(args)}`);
  }
  const integer = (key: string, min: number) => {
    const v = args[key];
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min) {
      throw traceError(name, at, `args.${key}`, `must be an integer${min >= 0 ? ' >= 0' : ''}, got ${describe(v)}`);
    }
    return v;
  };
  return {
    ts: e.ts,
    addr: integer('Addr', 0),
    bytes: integer('Bytes', -Number.MAX_SAFE_INTEGER),
    device: args['Device Type'] === undefined ? 0 : integer('Device Type', 0),
  };
}

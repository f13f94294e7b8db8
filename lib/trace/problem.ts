/**
 * Static planning problems in MiniMalloc's CSV: header with `id`, `lower`, `upper`, `size` (any order;
 * `start`/`begin` are read as `lower`; an inclusive `end` instead of `upper` gets 1 added); lifetimes are
 * half-open [lower, upper). Extra columns (`alignment`, `offset`, `hint`, ...) are kept, so a solution can
 * be written as the same CSV plus an `offset` column.
 */
import { fieldText, forEachLine, parseUint, splitFields, traceError } from './input.js';
import { Trace, TraceBuilder } from './trace.js';

/**
 * A static planning problem: buffers with a size and a lifetime [lower, upper), read from a MiniMalloc-style
 * CSV (readProblem()).
 */
export interface Problem {
  name: string;
  ids: string[];
  lower: Float64Array;
  upper: Float64Array;
  size: Float64Array;
  /** Per-buffer alignment when the file has an `alignment` column. */
  alignment: Float64Array | null;
  /** Offsets when the file already carries a solution (an `offset` column). */
  offsets: Float64Array | null;
  /** The file's header and rows as read, to write a solution as "input + offset". */
  columns: string[];
  rows: string[][];
}

const LOWER = ['lower', 'start', 'begin'];

export function isProblemHeader(header: string): boolean {
  const columns = header.split(',').map((c) => c.trim());
  return (
    columns.includes('id') &&
    columns.includes('size') &&
    LOWER.some((c) => columns.includes(c)) &&
    (columns.includes('upper') || columns.includes('end'))
  );
}

/**
 * Parses a problem CSV's text (columns id, size, lower/start/begin, upper/end; optional alignment and
 * offset); `name` is for messages. Fails with ERR_TP_BAD_TRACE.
 */
export function parseProblemCsv(text: Buffer, name: string): Problem {
  let columns: string[] | null = null;
  let lowerColumn = -1;
  let upperColumn = -1;
  let inclusiveEnd = false;
  let idColumn = -1;
  let sizeColumn = -1;
  let alignmentColumn = -1;
  let offsetColumn = -1;
  const ids: string[] = [];
  const rows: string[][] = [];
  const lower: number[] = [];
  const upper: number[] = [];
  const size: number[] = [];
  const alignment: number[] = [];
  const offsets: number[] = [];
  const seen = new Set<string>();
  const fields: number[] = [];
  let line = 0;
  // Made once, not per row.
  const number = (column: number, what: string, min: number) => {
    const value = parseUint(text, fields[2 * column], fields[2 * column + 1]);
    if (value < min) {
      throw traceError(name, line, columns![column], `must be ${what}, got ${fieldText(text, fields[2 * column], fields[2 * column + 1])}`);
    }
    return value;
  };

  forEachLine(text, (start, end, lineNumber) => {
    line = lineNumber;
    if (start === end || text[start] === 35 /* # */) return;
    if (!columns) {
      columns = text.toString('utf8', start, end).split(',').map((c) => c.trim());
      if (!isProblemHeader(columns.join(','))) {
        throw traceError(name, line, null, `expected a header with id, lower, upper and size columns, got ${fieldText(text, start, end)}`);
      }
      idColumn = columns.indexOf('id');
      sizeColumn = columns.indexOf('size');
      lowerColumn = columns.findIndex((c) => LOWER.includes(c));
      upperColumn = columns.indexOf('upper');
      if (upperColumn < 0) {
        upperColumn = columns.indexOf('end');
        inclusiveEnd = true;
      }
      alignmentColumn = columns.indexOf('alignment');
      offsetColumn = columns.indexOf('offset');
      return;
    }
    const count = splitFields(text, start, end, fields);
    if (count !== columns.length) throw traceError(name, line, null, `expected ${columns.length} fields, got ${count}`);
    const id = text.toString('utf8', fields[2 * idColumn], fields[2 * idColumn + 1]).trim();
    if (id === '') throw traceError(name, line, 'id', 'must not be empty');
    if (seen.has(id)) throw traceError(name, line, 'id', `${JSON.stringify(id)} appears twice`);
    seen.add(id);
    const lo = number(lowerColumn, 'a non-negative integer', 0);
    const hi = number(upperColumn, 'a non-negative integer', 0) + (inclusiveEnd ? 1 : 0);
    if (hi <= lo) {
      throw traceError(name, line, columns[upperColumn], `the lifetime [${lo}, ${hi}) is empty or inverted (${inclusiveEnd ? 'end' : 'upper'} must be ${inclusiveEnd ? '>=' : '>'} ${columns[lowerColumn]})`);
    }
    ids.push(id);
    lower.push(lo);
    upper.push(hi);
    size.push(number(sizeColumn, 'a positive integer', 1));
    if (alignmentColumn >= 0) alignment.push(number(alignmentColumn, 'a positive integer', 1));
    if (offsetColumn >= 0) offsets.push(number(offsetColumn, 'a non-negative integer', 0));
    const row: string[] = [];
    for (let c = 0; c < count; c++) row.push(text.toString('utf8', fields[2 * c], fields[2 * c + 1]));
    rows.push(row);
  });
  if (!columns) throw traceError(name, null, null, 'empty problem: no header and no buffers');
  return {
    name,
    ids,
    lower: Float64Array.from(lower),
    upper: Float64Array.from(upper),
    size: Float64Array.from(size),
    alignment: alignmentColumn >= 0 ? Float64Array.from(alignment) : null,
    offsets: offsetColumn >= 0 ? Float64Array.from(offsets) : null,
    columns,
    rows,
  };
}

/** The problem as a trace: at each time, the frees of buffers ending there, then the allocations starting there. */
export function problemToTrace(problem: Problem): Trace {
  const n = problem.size.length;
  const order = new Uint32Array(2 * n);
  for (let i = 0; i < 2 * n; i++) order[i] = i;
  // Event 2b+0 frees buffer b at upper[b]; event 2b+1 allocates it at lower[b]. Frees sort first at a tie.
  const time = (e: number) => ((e & 1) === 0 ? problem.upper[e >> 1] : problem.lower[e >> 1]);
  order.sort((a, b) => time(a) - time(b) || (a & 1) - (b & 1) || a - b);
  const builder = new TraceBuilder();
  const buffer = new Int32Array(n);
  for (const e of order) {
    if (e & 1) buffer[e >> 1] = builder.alloc(problem.size[e >> 1], 0);
    else builder.free(buffer[e >> 1], 0);
  }
  return builder.build(problem.name, 'minimalloc-csv');
}

/**
 * A trace's buffers as a problem: lifetimes in trace time. Buffers never freed live to the end of the
 * trace, or are left out with `neverFreed: 'exclude'` (what the problems in shared/traces do).
 */
export function problemFromTrace(trace: Trace, options: { neverFreed?: 'include' | 'exclude' } = {}): Problem {
  const include = options.neverFreed !== 'exclude';
  const ids: string[] = [];
  const lower: number[] = [];
  const upper: number[] = [];
  const size: number[] = [];
  for (let b = 0; b < trace.bufferCount; b++) {
    if (!include && !trace.freed(b)) continue;
    ids.push(String(ids.length));
    lower.push(trace.starts[b]);
    upper.push(trace.ends[b]);
    size.push(trace.sizes[b]);
  }
  return {
    name: trace.name,
    ids,
    lower: Float64Array.from(lower),
    upper: Float64Array.from(upper),
    size: Float64Array.from(size),
    alignment: null,
    offsets: null,
    columns: ['id', 'lower', 'upper', 'size'],
    rows: ids.map((id, i) => [id, String(lower[i]), String(upper[i]), String(size[i])]),
  };
}

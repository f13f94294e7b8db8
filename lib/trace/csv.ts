/**
 * tensorpool's trace CSV: header `op,id,size,stream`; rows `a,<id>,<bytes>,<stream>`, `f,<id>,,<stream>`,
 * `i,,,`; `#` lines are comments; blank lines are skipped. It is our own format, so it is read strictly:
 * a free of an unknown id, an id reused while live, or a size below 1 is an error naming line and field.
 */
import { fieldText, forEachLine, parseUint, splitFields, traceError } from './input.js';
import { PROGRAM_COMMENT, Trace, TraceBuilder } from './trace.js';

export const TRACE_CSV_HEADER = 'op,id,size,stream';
const FIELDS = ['op', 'id', 'size', 'stream'];

export function parseTraceCsv(text: Buffer, name: string): Trace {
  const builder = new TraceBuilder();
  const live = new Map<number, number>(); // id -> buffer index
  const fields: number[] = [];
  let sawHeader = false;
  let line = 0;
  let program: string | null = null;
  // Helpers over the current line's fields, made once (not per line: this loop runs a million times).
  const number = (field: number) => parseUint(text, fields[2 * field], fields[2 * field + 1]);
  const bad = (field: number, message: string) =>
    traceError(name, line, FIELDS[field], `${message}, got ${fieldText(text, fields[2 * field], fields[2 * field + 1])}`);

  forEachLine(text, (start, end, lineNumber) => {
    line = lineNumber;
    if (start === end) return;
    if (text[start] === 35 /* # */) {
      const comment = text.toString('latin1', start, Math.min(end, start + 512)).trimEnd();
      if (program === null && comment.startsWith(PROGRAM_COMMENT)) program = comment.slice(PROGRAM_COMMENT.length);
      return;
    }
    if (!sawHeader) {
      const header = text.toString('utf8', start, end).trim();
      if (header !== TRACE_CSV_HEADER) {
        throw traceError(name, line, null, `expected the header "${TRACE_CSV_HEADER}", got ${fieldText(text, start, end)}`);
      }
      sawHeader = true;
      return;
    }
    const count = splitFields(text, start, end, fields);
    if (count !== 4) throw traceError(name, line, null, `expected 4 fields (${TRACE_CSV_HEADER}), got ${count}`);
    const op = fields[1] - fields[0] === 1 ? text[fields[0]] : 0;

    if (op === 105 /* i */) {
      for (let f = 1; f < 4; f++) if (number(f) !== -1) throw bad(f, 'must be empty on an iteration row');
      builder.mark();
      return;
    }
    if (op !== 97 /* a */ && op !== 102 /* f */) throw bad(0, "must be 'a' (alloc), 'f' (free) or 'i' (iteration)");
    const id = number(1);
    if (id < 0) throw bad(1, 'must be a non-negative integer');
    const stream = number(3);
    if (stream < 0) throw bad(3, 'must be a non-negative integer');
    if (stream > 0x7fffffff) throw bad(3, 'must be below 2^31');

    if (op === 97) {
      const size = number(2);
      if (size < 1) throw bad(2, size === -2 || size === 0 ? 'must be a positive integer' : 'is required on an alloc row');
      if (live.has(id)) throw bad(1, `id ${id} is already live (allocated again before its free)`);
      live.set(id, builder.alloc(size, stream));
    } else {
      if (number(2) !== -1) throw bad(2, 'must be empty on a free row');
      const buffer = live.get(id);
      if (buffer === undefined) throw bad(1, `free of id ${id}, which is not live (never allocated, or already freed)`);
      live.delete(id);
      builder.free(buffer, stream);
    }
  });
  if (!sawHeader) throw traceError(name, null, null, `empty trace: no header "${TRACE_CSV_HEADER}" and no events`);
  return builder.build(name, 'tensorpool-csv', undefined, program);
}

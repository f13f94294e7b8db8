/**
 * Reading trace files: gzip detection, and errors that name the file, the line (or JSON path) and field.
 */
import zlib from 'node:zlib';

import { TensorPoolError } from '../errors.js';
import { readBounded } from '../io/files.js';
import { describe } from '../validate.js';

/** A malformed-input error: `file:line: field "x": what is wrong`. */
export function traceError(file: string, where: string | number | null, field: string | null, message: string): TensorPoolError {
  const at = where === null ? file : typeof where === 'number' ? `${file}:${where}` : `${file} at ${where}`;
  return new TensorPoolError('ERR_TP_BAD_TRACE', `${at}: ${field ? `field "${field}": ` : ''}${message}`);
}

/**
 * The most bytes a trace may hold, read or inflated: 2 GiB. An endless source (/dev/zero, a pipe that never
 * closes) or a gzip bomb ends in an error that says so instead of growing until the process aborts.
 */
export const MAX_INPUT_BYTES = 2 ** 31;

/** The file's bytes, decoded by decodeInput. `path` must be a file's path (not a descriptor). */
export function readInput(path: string): Buffer {
  if (typeof path !== 'string' || path === '') {
    throw new TensorPoolError('ERR_TP_INVALID_ARGUMENT', `a trace is read from a file path (a non-empty string), got ${describe(path)}`);
  }
  let raw: Buffer;
  try {
    raw = readBounded(path, MAX_INPUT_BYTES, () => tooLarge(path, 'is'));
  } catch (error) {
    if (error instanceof TensorPoolError) throw error;
    const code = (error as NodeJS.ErrnoException).code;
    const why = code === 'ENOENT' ? 'no such file' : code === 'EISDIR' ? 'is a directory' : (error as Error).message;
    throw traceError(path, null, null, `cannot read the trace: ${why}`);
  }
  return decodeInput(raw, path);
}

function tooLarge(name: string, verb: 'is' | 'inflates'): TensorPoolError {
  return traceError(name, null, null, `the input ${verb === 'is' ? 'is' : 'inflates to'} more than ${MAX_INPUT_BYTES / 2 ** 30} GiB, the most a trace may hold`);
}

/** Gunzips when the bytes start with the gzip magic number, and drops a UTF-8 byte-order mark. */
export function decodeInput(raw: Buffer, name: string): Buffer {
  let text = raw;
  if (raw.length >= 2 && raw[0] === 0x1f && raw[1] === 0x8b) {
    try {
      text = zlib.gunzipSync(raw, { maxOutputLength: MAX_INPUT_BYTES });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE') throw tooLarge(name, 'inflates');
      throw traceError(name, null, null, `not a valid gzip stream (truncated or corrupt?): ${(error as Error).message}`);
    }
  }
  return text[0] === 0xef && text[1] === 0xbb && text[2] === 0xbf ? text.subarray(3) : text;
}

/**
 * Calls `fn(start, end, lineNumber)` for each line of `text` (1-based numbers; `end` excludes the newline
 * and a preceding \r). Stops early when fn returns false.
 */
export function forEachLine(text: Buffer, fn: (start: number, end: number, line: number) => boolean | void): void {
  let start = 0;
  let line = 1;
  const n = text.length;
  while (start < n) {
    let end = text.indexOf(10, start);
    if (end < 0) end = n;
    const next = end + 1;
    if (end > start && text[end - 1] === 13) end--;
    if (fn(start, end, line) === false) return;
    start = next;
    line++;
  }
}

/** The comma-separated fields of text[start, end) as [start, end) pairs, appended into `out` (reused). */
export function splitFields(text: Buffer, start: number, end: number, out: number[]): number {
  out.length = 0;
  let fieldStart = start;
  for (let i = start; i < end; i++) {
    if (text[i] === 44) {
      out.push(fieldStart, i);
      fieldStart = i + 1;
    }
  }
  out.push(fieldStart, end);
  return out.length >> 1;
}

/**
 * A non-negative decimal integer in text[start, end): its value, -1 for an empty field, -2 for anything
 * else (signs, decimals, letters, values above 2^53).
 */
export function parseUint(text: Buffer, start: number, end: number): number {
  if (start === end) return -1;
  let value = 0;
  for (let i = start; i < end; i++) {
    const d = text[i] - 48;
    if (d < 0 || d > 9) return -2;
    value = value * 10 + d;
  }
  return value <= Number.MAX_SAFE_INTEGER ? value : -2;
}

export function fieldText(text: Buffer, start: number, end: number): string {
  const s = text.toString('utf8', start, Math.min(end, start + 40));
  return JSON.stringify(end - start > 40 ? s + '…' : s);
}

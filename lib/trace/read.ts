/**
 * readTrace(path): reads any of the three trace formats, detected from the content (not the file name):
 * gzip or plain; JSON → a torch.profiler Chrome trace; a CSV whose header is `op,id,size,stream` →
 * tensorpool's trace CSV; a CSV with id/lower/upper/size columns → a MiniMalloc problem.
 */
import { decodeInput, readInput, traceError } from './input.js';
import { parseChromeTrace } from './chrome.js';
import { TRACE_CSV_HEADER, parseTraceCsv } from './csv.js';
import { isProblemHeader, parseProblemCsv, problemFromTrace, problemToTrace, type Problem } from './problem.js';
import type { Trace } from './trace.js';

/** The file formats readTrace() and readProblem() tell apart by their content. */
export type DetectedFormat = 'tensorpool-csv' | 'chrome-trace' | 'minimalloc-csv';

/** Which reader `text` (already gunzipped) is for. */
export function detectFormat(text: Buffer, name: string): DetectedFormat {
  let i = 0;
  while (i < text.length && (text[i] === 32 || text[i] === 9 || text[i] === 10 || text[i] === 13)) i++;
  if (i === text.length) throw traceError(name, null, null, 'empty file');
  if (text[i] === 123 || text[i] === 91) return 'chrome-trace'; // { or [
  // The first line that is not a comment is the header.
  let start = 0;
  let lineNumber = 1;
  while (start < text.length) {
    let end = text.indexOf(10, start);
    if (end < 0) end = text.length;
    const line = text.toString('utf8', start, end).trim();
    if (line !== '' && !line.startsWith('#')) {
      if (line === TRACE_CSV_HEADER) return 'tensorpool-csv';
      if (isProblemHeader(line)) return 'minimalloc-csv';
      throw traceError(
        name,
        lineNumber,
        null,
        `unrecognised format: expected a tensorpool trace CSV (header "${TRACE_CSV_HEADER}"), a torch.profiler ` +
          `Chrome trace (JSON) or a MiniMalloc problem CSV (header "id,lower,upper,size"); the first line is ` +
          JSON.stringify(line.length > 60 ? line.slice(0, 60) + '…' : line),
      );
    }
    start = end + 1;
    lineNumber++;
  }
  throw traceError(name, null, null, 'empty file: only comments');
}

/** Parses a trace from bytes (plain or gzip); `name` labels errors and reports. */
export function parseTrace(raw: Buffer, name: string): Trace {
  const text = decodeInput(raw, name);
  switch (detectFormat(text, name)) {
    case 'tensorpool-csv':
      return parseTraceCsv(text, name);
    case 'chrome-trace':
      return parseChromeTrace(text, name);
    case 'minimalloc-csv':
      return problemToTrace(parseProblemCsv(text, name));
  }
}

/** Reads a trace file of any supported format. Malformed input throws ERR_TP_BAD_TRACE naming file, line and field. */
export function readTrace(path: string): Trace {
  return parseTrace(readInput(path), path);
}

/**
 * Reads a static planning problem: a MiniMalloc CSV as it is, or any trace as its buffers (lifetimes in
 * trace time; buffers never freed live to the end).
 */
export function readProblem(path: string): Problem {
  const text = readInput(path);
  return detectFormat(text, path) === 'minimalloc-csv' ? parseProblemCsv(text, path) : problemFromTrace(parseTrace(text, path));
}

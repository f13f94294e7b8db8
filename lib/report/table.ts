/** Plain-text tables for the CLI and the benchmarks. */

import type { MedianInterval } from './stats.js';

export type Cell = string | number | null | undefined;

/**
 * Right-aligns numbers, left-aligns text; `null`/`undefined` print as '-'. `above`: a header row printed above
 * `headers` (what statistic each column holds, say), '' where a column has none.
 */
export function formatTable(headers: string[], rows: Cell[][], above?: string[]): string {
  const text = rows.map((row) => row.map((cell) => (cell === null || cell === undefined ? '-' : String(cell))));
  const numeric = headers.map((_, c) => rows.every((row) => typeof row[c] === 'number' || row[c] == null));
  const widths = headers.map((h, c) => Math.max(h.length, above?.[c]?.length ?? 0, ...text.map((row) => row[c]?.length ?? 0)));
  const line = (cells: string[]) =>
    cells
      .map((cell, c) => (numeric[c] ? cell.padStart(widths[c]) : cell.padEnd(widths[c])))
      .join('  ')
      .trimEnd();
  return [...(above ? [line(headers.map((_, c) => above[c] ?? ''))] : []), line(headers), line(widths.map((w) => '-'.repeat(w))), ...text.map(line)].join('\n');
}

export function formatBytes(bytes: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes;
  let unit = 0;
  while (Math.abs(value) >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${unit === 0 ? value : value.toFixed(value >= 100 ? 0 : value >= 10 ? 1 : 2)} ${units[unit]}`;
}

/** A number with a fixed count of significant decimals, for table cells. */
export function round(value: number, digits = 2): number {
  const f = 10 ** digits;
  return Math.round(value * f) / f;
}

/** "median (low-high)", e.g. a ratio with its confidence interval: 0.99 (0.97-1.01). */
export function formatInterval(interval: MedianInterval, digits = 2): string {
  return `${round(interval.median, digits)} (${round(interval.low, digits)}-${round(interval.high, digits)})`;
}

/**
 * A static layout as files: the solution CSV (the problem's CSV plus an `offset` column, as MiniMalloc
 * writes it) and an SVG of the rectangles in their container (time across, offset up), with the lower
 * bound marked (S2 step 7).
 */
import type { OffsetLayout } from '../offsets/planner.js';
import type { Problem } from '../trace/problem.js';
import { formatBytes } from './table.js';

/** The solution CSV. With the problem's own rows, they are kept (an existing offset column is replaced). */
export function solutionCsv(layout: OffsetLayout, problem: Problem | null): string {
  if (problem) {
    const at = problem.columns.indexOf('offset');
    const columns = at >= 0 ? problem.columns : [...problem.columns, 'offset'];
    const rows = problem.rows.map((row, b) => {
      const out = [...row];
      if (at >= 0) out[at] = String(layout.offsets[b]);
      else out.push(String(layout.offsets[b]));
      return out.join(',');
    });
    return [columns.join(','), ...rows].join('\n') + '\n';
  }
  const rows = layout.ids.map((id, b) => `${id},${layout.sizes[b]},${layout.offsets[b]}`);
  return ['id,size,offset', ...rows].join('\n') + '\n';
}

function escape(text: string): string {
  return text.replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]!);
}

/**
 * Rectangles in the container: x = lifetime (interval problems; for conflict graphs, one column per
 * buffer), y = [offset, offset + size) with 0 at the bottom; the lower bound as a dashed line.
 */
export function layoutSvg(layout: OffsetLayout, problem: Problem | null, title: string): string {
  const width = 1000;
  const height = 600;
  const left = 80;
  const bottom = 30;
  const top = 30;
  const n = layout.sizes.length;
  const lower = problem ? problem.lower : Float64Array.from({ length: n }, (_, b) => b);
  const upper = problem ? problem.upper : Float64Array.from({ length: n }, (_, b) => b + 1);
  let tMin = Infinity;
  let tMax = -Infinity;
  for (let b = 0; b < n; b++) {
    tMin = Math.min(tMin, lower[b]);
    tMax = Math.max(tMax, upper[b]);
  }
  const yMax = Math.max(layout.peak, layout.lowerBound) || 1;
  const x = (t: number) => left + ((width - left - 10) * (t - tMin)) / Math.max(1, tMax - tMin);
  const y = (v: number) => height - bottom - ((height - bottom - top) * v) / yMax;
  const rects: string[] = [];
  for (let b = 0; b < n; b++) {
    const x0 = x(lower[b]);
    const y0 = y(layout.offsets[b] + layout.sizes[b]);
    const w = Math.max(0.5, x(upper[b]) - x0);
    const h = Math.max(0.5, y(layout.offsets[b]) - y0);
    const hue = (b * 137) % 360;
    rects.push(
      `<rect x="${x0.toFixed(2)}" y="${y0.toFixed(2)}" width="${w.toFixed(2)}" height="${h.toFixed(2)}" fill="hsl(${hue},55%,62%)" stroke="#333" stroke-width="0.2"><title>${escape(layout.ids[b])}: ${layout.sizes[b]} B at ${layout.offsets[b]}</title></rect>`,
    );
  }
  const bound = y(layout.lowerBound);
  return `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${width} ${height}" width="${width}" height="${height}" font-family="sans-serif" font-size="12">
<title>${escape(title)}</title>
<rect width="${width}" height="${height}" fill="#fff"/>
<text x="${left}" y="18" font-weight="600">${escape(title)}: height ${escape(formatBytes(layout.peak))}, lower bound ${escape(formatBytes(layout.lowerBound))}</text>
<line x1="${left}" y1="${top}" x2="${left}" y2="${height - bottom}" stroke="#999"/>
<line x1="${left}" y1="${height - bottom}" x2="${width - 10}" y2="${height - bottom}" stroke="#999"/>
<text x="${left - 6}" y="${height - bottom}" text-anchor="end">0</text>
<text x="${left - 6}" y="${y(layout.peak) + 4}" text-anchor="end">${escape(formatBytes(layout.peak))}</text>
<text x="${(width + left) / 2}" y="${height - 8}" text-anchor="middle">${problem ? 'time' : 'buffer'}</text>
<g id="rectangles">
${rects.join('\n')}
</g>
<line id="lower-bound" x1="${left}" y1="${bound.toFixed(2)}" x2="${width - 10}" y2="${bound.toFixed(2)}" stroke="#c53030" stroke-dasharray="6 4"/>
<text x="${width - 12}" y="${(bound - 4).toFixed(2)}" text-anchor="end" fill="#c53030">lower bound</text>
</svg>
`;
}

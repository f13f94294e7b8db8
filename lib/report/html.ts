/**
 * The replay report: one self-contained HTML page (inline CSS and SVG, no script, nothing fetched) with
 * bars of ns/op, page faults and RSS per allocator, the results table, and the trace's memory timeline
 * (bytes live over time, with the lower bound and tensorpool's arena drawn in).
 */
import { isTensorpool } from '../replay/allocators.js';
import type { ReplayReport } from '../replay/replay.js';
import type { Trace } from '../trace/trace.js';
import { describeMachine } from './machine.js';
import { formatBytes } from './table.js';

function escape(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}

function number(value: number, digits = 0): string {
  return Number.isFinite(value) ? value.toLocaleString('en-US', { maximumFractionDigits: digits }) : '–';
}

interface Bar {
  label: string;
  value: number;
  text: string;
  highlight: boolean;
}

/**
 * Horizontal bars, on a log scale for values that span orders of magnitude (faults from 0 to 10^5), else
 * linear, with an optional reference line (the lower bound).
 */
function barChart(id: string, title: string, bars: Bar[], options: { log: boolean; reference?: { value: number; label: string } }): string {
  const width = 760;
  const labelWidth = 130;
  const barHeight = 26;
  const height = 40 + bars.length * (barHeight + 8) + (options.reference ? 16 : 0);
  const f = (v: number) => (options.log ? Math.log10(1 + v) : v);
  const max = Math.max(options.log ? 1 : 0, ...bars.map((b) => f(b.value)), options.reference ? f(options.reference.value) : 0) || 1;
  const scale = (v: number) => ((width - labelWidth - 140) * f(v)) / max;
  const rows = bars
    .map((b, i) => {
      const y = 34 + i * (barHeight + 8);
      const w = Math.max(1, scale(b.value));
      return (
        `<text x="${labelWidth - 8}" y="${y + 18}" text-anchor="end" class="label">${escape(b.label)}</text>` +
        `<rect x="${labelWidth}" y="${y}" width="${w.toFixed(1)}" height="${barHeight}" class="${b.highlight ? 'bar ours' : 'bar'}"><title>${escape(b.label)}: ${escape(b.text)}</title></rect>` +
        `<text x="${(labelWidth + w + 6).toFixed(1)}" y="${y + 18}" class="value">${escape(b.text)}</text>`
      );
    })
    .join('');
  const reference = options.reference
    ? `<line x1="${(labelWidth + scale(options.reference.value)).toFixed(1)}" x2="${(labelWidth + scale(options.reference.value)).toFixed(1)}" y1="28" y2="${height - 14}" class="bound"/>` +
      `<text x="${(labelWidth + scale(options.reference.value)).toFixed(1)}" y="${height - 2}" text-anchor="middle" class="bound-label">${escape(options.reference.label)}</text>`
    : '';
  return (
    `<svg id="${id}" class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${width} ${height}" width="${width}" height="${height}" role="img" aria-label="${escape(title)}">` +
    `<text x="0" y="18" class="title">${escape(title)}</text>${rows}${reference}</svg>`
  );
}

/** Bytes live after each event, as a line; the lower bound and the arenas as horizontal lines. */
function timeline(trace: Trace, lowerBound: number, arenaBytes: number | null, offsetsHeight: number | null): string {
  const width = 760;
  const height = 300;
  const left = 70;
  const bottom = 30;
  const live = trace.liveBytes();
  const buckets = Math.min(live.length, 1000);
  const top = Math.max(lowerBound, arenaBytes ?? 0, offsetsHeight ?? 0) * 1.08 || 1;
  const x = (i: number) => left + ((width - left - 10) * i) / Math.max(1, buckets - 1);
  const y = (v: number) => height - bottom - ((height - bottom - 20) * v) / top;
  const points: string[] = [];
  for (let b = 0; b < buckets; b++) {
    // The most bytes live within the bucket: a peak is never averaged away.
    const from = Math.floor((b * live.length) / buckets);
    const to = Math.max(from + 1, Math.floor(((b + 1) * live.length) / buckets));
    let peak = 0;
    for (let e = from; e < to; e++) peak = Math.max(peak, live[e]);
    points.push(`${x(b).toFixed(1)},${y(peak).toFixed(1)}`);
  }
  // Labels sit at the right above their line, or (`below`) at the left under it, so that lines of equal
  // height keep readable labels.
  const line = (value: number, cls: string, label: string, below = false) =>
    `<line x1="${left}" x2="${width - 10}" y1="${y(value).toFixed(1)}" y2="${y(value).toFixed(1)}" class="${cls}"/>` +
    (below
      ? `<text x="${left + 6}" y="${(y(value) + 14).toFixed(1)}" class="${cls}-label">${escape(label)}</text>`
      : `<text x="${width - 12}" y="${(y(value) - 5).toFixed(1)}" text-anchor="end" class="${cls}-label">${escape(label)}</text>`);
  const ticks = [0, 0.25, 0.5, 0.75, 1]
    .map((f) => `<text x="${left - 6}" y="${(y(f * top) + 4).toFixed(1)}" text-anchor="end" class="axis">${escape(formatBytes(f * top))}</text>`)
    .join('');
  const marks = trace.iterationStarts
    .slice(1)
    .map((start) => {
      const xi = x((start / Math.max(1, live.length - 1)) * (buckets - 1)).toFixed(1);
      return `<line x1="${xi}" x2="${xi}" y1="20" y2="${height - bottom}" class="iteration"/>`;
    })
    .join('');
  return (
    `<svg id="timeline" class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${width} ${height}" width="${width}" height="${height}" role="img" aria-label="memory timeline">` +
    `<text x="0" y="14" class="title">Bytes live over the trace (${escape(String(trace.eventCount))} events; dotted: iteration starts)</text>` +
    `<line x1="${left}" x2="${left}" y1="20" y2="${height - bottom}" class="axis-line"/>` +
    `<line x1="${left}" x2="${width - 10}" y1="${height - bottom}" y2="${height - bottom}" class="axis-line"/>` +
    ticks +
    marks +
    `<polyline points="${points.join(' ')}" class="live"/>` +
    line(lowerBound, 'bound', `lower bound ${formatBytes(lowerBound)}`) +
    (arenaBytes ? line(arenaBytes, 'arena', `tensorpool arena ${formatBytes(arenaBytes)}`) : '') +
    (offsetsHeight ? line(offsetsHeight, 'offsets', `tensorpool-offsets arena ${formatBytes(offsetsHeight)}`, true) : '') +
    `<text x="${(width + left) / 2}" y="${height - 8}" text-anchor="middle" class="axis">time (allocations and frees)</text>` +
    `</svg>`
  );
}

export function replayReportHtml(report: ReplayReport, trace: Trace): string {
  const available = report.results.filter((r) => r.available);
  const bars = (pick: (r: (typeof available)[number]) => number, text: (v: number) => string) =>
    available.map((r) => ({ label: r.allocator, value: pick(r), text: text(pick(r)), highlight: isTensorpool(r.allocator) }));
  const rows = report.results
    .map((r) =>
      r.available
        ? `<tr${isTensorpool(r.allocator) ? ' class="ours"' : ''}><td>${escape(r.allocator)}</td><td>${number(r.nsPerOp)}</td>` +
          `<td>${r.vsBestPeer === null ? '–' : number(r.vsBestPeer, 2)}</td><td>${number(r.steadyMinorFaultsPerRep, 1)}</td>` +
          `<td>${escape(formatBytes(r.rssGrowthBytes))}</td><td>${number(r.rssVsLowerBound, 3)}</td></tr>`
        : `<tr class="missing"><td>${escape(r.allocator)}</td><td colspan="5">${escape(r.error ?? 'not available')}</td></tr>`,
    )
    .join('');
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>tensorpool replay: ${escape(report.trace)}</title>
<style>
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px auto; max-width: 820px; color: #222; }
h1 { font-size: 20px; margin-bottom: 4px; }
.meta { color: #555; margin: 0 0 16px; }
table { border-collapse: collapse; margin: 12px 0 20px; }
th, td { padding: 4px 10px; text-align: right; border-bottom: 1px solid #ddd; }
th:first-child, td:first-child { text-align: left; }
tr.ours td { font-weight: 600; }
tr.missing td { color: #888; text-align: left; }
.chart { display: block; margin: 18px 0; }
.title { font-weight: 600; font-size: 14px; }
.label, .value, .axis { font-size: 12px; fill: #333; }
.bar { fill: #9aa9b8; } .bar.ours { fill: #2b6cb0; }
.live { fill: none; stroke: #2b6cb0; stroke-width: 1.5; }
.bound { stroke: #c53030; stroke-dasharray: 6 4; } .bound-label { fill: #c53030; font-size: 12px; }
.arena { stroke: #2f855a; stroke-dasharray: 2 3; } .arena-label { fill: #2f855a; font-size: 12px; }
.offsets { stroke: #6b46c1; stroke-dasharray: 8 3; } .offsets-label { fill: #6b46c1; font-size: 12px; }
.axis-line { stroke: #999; } .iteration { stroke: #bbb; stroke-dasharray: 1 3; }
</style>
</head>
<body>
<h1>Trace replay: ${escape(report.trace)}</h1>
<p class="meta">${report.events} events, ${report.buffers} buffers, lower bound ${escape(formatBytes(report.lowerBoundBytes))};
${report.reps} repetitions per allocator, interleaved, touch <code>${escape(report.touch)}</code>; steady state = last half.<br>
Machine: ${escape(describeMachine(report.machine))}.</p>
<table id="results">
<thead><tr><th>allocator</th><th>ns/op</th><th>× best peer</th><th>minor faults / rep</th><th>RSS growth</th><th>× lower bound</th></tr></thead>
<tbody>${rows}</tbody>
</table>
${barChart('ns-per-op', 'ns per operation, median (log scale)', bars((r) => r.nsPerOp, (v) => `${number(v)} ns`), { log: true })}
${barChart('faults', 'minor page faults per repetition, steady state (log scale)', bars((r) => r.steadyMinorFaultsPerRep, (v) => number(v, 1)), { log: true })}
${barChart('rss', 'peak RSS growth over the replay', bars((r) => r.rssGrowthBytes, (v) => formatBytes(v)), {
  log: false,
  reference: { value: report.lowerBoundBytes, label: `lower bound ${formatBytes(report.lowerBoundBytes)}` },
})}
${timeline(trace, report.lowerBoundBytes, report.plan?.arenaBytes ?? null, report.offsetPlan?.height ?? null)}
</body>
</html>
`;
}

/**
 * Draws README's picture: time, page faults and memory of onnxruntime-node inference under ONNX Runtime's
 * arena, the peers and tensorpool, each as a multiple of the arena's, from the JSON that
 * `bench/onnxruntime.ts --json` writes. One SVG, three panels, one bar per configuration that ran.
 *
 *   npx tsx scripts/picture.ts [--help] BENCH.json [-o docs/onnxruntime.svg] [--configs LIST]
 *
 * The bench run that made docs/onnxruntime.svg, and the machine, are in docs/benchmarks.md.
 */
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';

const USAGE = `usage: npx tsx scripts/picture.ts BENCH.json [-o OUT.svg] [--configs LIST]

Draws time (paired with the arena's runs: median ratio and 95% interval), page faults per run and memory
above the process's base, each against ONNX Runtime's arena, from the JSON of
\`npx tsx bench/onnxruntime.ts --json BENCH.json\`.

  -o, --out FILE   the SVG to write (default docs/onnxruntime.svg)
  --configs LIST   the configurations to draw, comma-separated, in the bench's names (default: every one
                   that ran); ort-arena is always drawn
  --help           this text`;

interface Interval {
  median: number;
  low: number;
  high: number;
}
interface Row {
  config: string;
  time: Interval;
  faults: number;
  memory: number;
}

/** What each configuration is called in the picture. */
const LABELS: Record<string, string> = {
  'ort-arena': "ONNX Runtime's arena",
  glibc: 'arena off: glibc',
  jemalloc: 'arena off: jemalloc',
  mimalloc: 'arena off: mimalloc',
  tcmalloc: 'arena off: tcmalloc',
  tensorpool: 'tensorpool, in-process',
  'tensorpool-planned': 'tensorpool, in-process, plan',
  'tensorpool-planned-huge': 'tensorpool, in-process, plan, huge pages',
  'tensorpool-run': 'tensorpool run --adaptive',
  'tensorpool-run-planned': 'tensorpool run --plan',
};

function fail(message: string): never {
  console.error(`picture: ${message}`);
  process.exit(2);
}

function finite(value: unknown, what: string): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) fail(`${what} is not a non-negative number`);
  return value;
}

function readRows(file: string, only: Set<string> | null): { rows: Row[]; title: string } {
  let report: unknown;
  try {
    const stat = fs.statSync(file);
    if (!stat.isFile()) fail(`${file} is not a file`);
    if (stat.size > 16 << 20) fail(`${file} is ${stat.size} bytes: not a bench report`);
    report = JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch (error) {
    fail(`cannot read ${file}: ${(error as Error).message}`);
  }
  const r = report as { model?: unknown; shapes?: unknown; cycles?: unknown; results?: unknown };
  if (typeof r !== 'object' || r === null || !Array.isArray(r.results)) fail(`${file} has no "results": not the JSON of bench/onnxruntime.ts`);
  const results = r.results as Record<string, unknown>[];
  const arena = results.find((x) => x.config === 'ort-arena');
  if (!arena || arena.error) fail(`${file} has no result for ort-arena, which every figure is relative to`);
  const arenaFaults = finite(arena.faultsPerRun, 'ort-arena faultsPerRun');
  const arenaMemory = finite(arena.tensorRssBytes, 'ort-arena tensorRssBytes');
  if (arenaFaults === 0 || arenaMemory === 0) fail('ort-arena has 0 faults or 0 bytes: no ratio can be drawn');
  const rows: Row[] = [];
  for (const x of results) {
    if (x.error || x.pairedMsVsArena === null || x.pairedMsVsArena === undefined) continue; // did not run (a peer not installed)
    const name = String(x.config);
    if (only && name !== 'ort-arena' && !only.has(name)) continue;
    const t = x.pairedMsVsArena as Record<string, unknown>;
    rows.push({
      config: name,
      time: { median: finite(t.median, `${name} time`), low: finite(t.low, `${name} time`), high: finite(t.high, `${name} time`) },
      faults: finite(x.faultsPerRun, `${name} faultsPerRun`) / arenaFaults,
      memory: finite(x.tensorRssBytes, `${name} tensorRssBytes`) / arenaMemory,
    });
  }
  const model = typeof r.model === 'string' ? path.basename(r.model) : 'model';
  const shapes = Array.isArray(r.shapes) ? r.shapes.length : 0;
  return { rows, title: `onnxruntime-node, ${model}, a cycle of ${shapes} input shapes: each figure as a multiple of ONNX Runtime's arena` };
}

const escape = (s: string): string => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
const fmt = (v: number): string => (v >= 0.1 ? v.toFixed(2) : v >= 0.01 ? v.toFixed(3) : v.toFixed(4));

function svg(rows: Row[], title: string): string {
  const labelWidth = 230;
  const panelWidth = 250;
  const gap = 20;
  const rowHeight = 24;
  const top = 64;
  const width = labelWidth + 3 * (panelWidth + gap);
  const height = top + rows.length * rowHeight + 36;
  const panels: { title: string; value: (r: Row) => number; whisker?: (r: Row) => [number, number] }[] = [
    { title: 'time per run (paired, 95% interval)', value: (r) => r.time.median, whisker: (r) => [r.time.low, r.time.high] },
    { title: 'page faults per run', value: (r) => r.faults },
    { title: 'memory above the base', value: (r) => r.memory },
  ];
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12">`,
    `<rect width="${width}" height="${height}" fill="white"/>`,
    `<text x="8" y="20" font-size="14" font-weight="bold">${escape(title)}</text>`,
    `<text x="8" y="38" fill="#555">shorter is better; the dashed line is the arena (1x)</text>`,
  ];
  panels.forEach((panel, p) => {
    const x0 = labelWidth + p * (panelWidth + gap);
    const max = Math.max(1, ...rows.map((r) => (panel.whisker ? panel.whisker(r)[1] : panel.value(r))));
    const scale = (v: number): number => (Math.min(v, max) / max) * (panelWidth - 60);
    out.push(`<text x="${x0}" y="${top - 8}" font-weight="bold">${escape(panel.title)}</text>`);
    rows.forEach((r, i) => {
      const y = top + i * rowHeight;
      const ours = r.config.startsWith('tensorpool');
      const v = panel.value(r);
      out.push(`<rect x="${x0}" y="${y + 4}" width="${Math.max(1, scale(v)).toFixed(1)}" height="${rowHeight - 8}" fill="${ours ? '#2b7bb9' : '#aaaaaa'}"/>`);
      if (panel.whisker) {
        const [lo, hi] = panel.whisker(r);
        out.push(`<line x1="${(x0 + scale(lo)).toFixed(1)}" x2="${(x0 + scale(hi)).toFixed(1)}" y1="${y + rowHeight / 2}" y2="${y + rowHeight / 2}" stroke="black"/>`);
      }
      const end = panel.whisker ? panel.whisker(r)[1] : v;
      out.push(`<text x="${(x0 + scale(end) + 4).toFixed(1)}" y="${y + rowHeight / 2 + 4}">${fmt(v)}x</text>`);
    });
    const one = x0 + scale(1);
    out.push(`<line x1="${one.toFixed(1)}" x2="${one.toFixed(1)}" y1="${top}" y2="${top + rows.length * rowHeight}" stroke="#333" stroke-dasharray="3,3"/>`);
  });
  rows.forEach((r, i) => {
    const y = top + i * rowHeight + rowHeight / 2 + 4;
    out.push(`<text x="8" y="${y}"${r.config.startsWith('tensorpool') ? ' font-weight="bold"' : ''}>${escape(LABELS[r.config] ?? r.config)}</text>`);
  });
  out.push(`<text x="8" y="${height - 12}" fill="#555">docs/benchmarks.md has the command, the date and the machine; scripts/picture.ts draws this from the bench's JSON</text>`);
  out.push('</svg>');
  return out.join('\n') + '\n';
}

function main(): void {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: { out: { type: 'string', short: 'o' }, configs: { type: 'string' }, help: { type: 'boolean' } },
  });
  if (values.help) {
    console.log(USAGE);
    return;
  }
  if (positionals.length !== 1) fail(`one bench JSON file expected, got ${positionals.length}\n${USAGE}`);
  const out = values.out ?? path.join(__dirname, '../docs/onnxruntime.svg');
  if (out === '') fail('-o needs a file name');
  let only: Set<string> | null = null;
  if (values.configs !== undefined) {
    only = new Set(values.configs.split(',').map((c) => c.trim()));
    for (const c of only) if (!(c in LABELS)) fail(`unknown configuration ${JSON.stringify(c)} (known: ${Object.keys(LABELS).join(', ')})`);
  }
  const { rows, title } = readRows(positionals[0], only);
  if (only) for (const c of only) if (!rows.some((r) => r.config === c)) fail(`${c} did not run in ${positionals[0]}`);
  const text = svg(rows, title);
  // Through a temporary file and a rename: a reader never sees half a picture, and a failure keeps the old one.
  const temporary = `${out}.${process.pid}.tmp`;
  fs.writeFileSync(temporary, text);
  fs.renameSync(temporary, out);
  console.log(`wrote ${out} (${rows.length} configurations)`);
}

main();

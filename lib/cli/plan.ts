import { readInput } from '../trace/input.js';
import { parseJson } from '../trace/chrome.js';
import { planOffsets, STRATEGIES, type ConflictProblem, type OperatorGraph, type PlanningInput, type Strategy } from '../offsets/planner.js';
import { layoutSvg, solutionCsv } from '../report/layout.js';
import { formatBytes, formatTable, round } from '../report/table.js';
import { writeFileAtomic } from '../io/files.js';
import { readProblem } from '../trace/read.js';
import type { Problem } from '../trace/problem.js';
import { CliError, bytesOption, integerOption, oneOf, onePositional, parseCommand, withExamples, writeJsonFile, type Command, type Example } from './common.js';

const usage = `usage: tensorpool plan <problem.csv | trace | graph.json> [--strategy NAME] [--time-limit MS] [--capacity BYTES]
                       [-o solution.csv] [--svg layout.svg] [--json FILE]

Places every buffer at a fixed offset in one arena so that no two conflicting buffers overlap, and prints
the arena's height against the lower bound. Every layout is checked by the verifier.

input: a MiniMalloc problem CSV (id,lower,upper,size; half-open lifetimes), any trace (its buffers, with
       lifetimes in trace time), or a JSON graph: { "sizes": [...], "conflicts": [[i, j], ...] } or S1's
       { "operators": [{ "id", "size" }], "edges": [[producer, consumer], ...], "order"?: [...] }.

  --strategy NAME     ${STRATEGIES.join(', ')} (default best)
                        greedy-size: size descending, smallest sufficient gap (the TFLite / XLA baseline)
                        s1: S1, size descending, lowest memory no mutually exclusive buffer holds
                        s2: S2, strip packing: metric orders, bottom alignment, risk-class reordering
                        s3: S3, a genetic search over allocation orders
                        best: constructive heuristics, then exact search (MiniMalloc-style) or restarts
  --time-limit MS     how long s2, s3 and best may search; they return the best found (default 10000).
                      best's first layout takes O(n log n) whatever the buffers live together (an
                      allocator run over time, best fit: a recording of 1.1M buffers in 0.5 s); s2's and
                      s3's always complete, in time that grows with the pairs of buffers live together
  --capacity BYTES    a fixed arena size: must hold the largest buffer; says whether the layout fits
  -o, --output FILE   the solution: the input CSV plus an offset column (graphs: id,size,offset)
  --svg FILE          the layout as rectangles (time across, offset up) with the lower bound marked
  --json FILE         write { strategy, peak, lowerBound, ms, valid, optimal, ratio, buffers, notes, ... }`;

const examples: Example[] = [
  { what: 'the best layout found in 10 s for a MiniMalloc problem, written with its offsets', command: 'tensorpool plan problem.csv -o solution.csv' },
  { what: "a recording's buffers laid out by S2 in at most 2 s, drawn", command: 'tensorpool plan app.csv --strategy s2 --time-limit 2000 --svg layout.svg' },
  { what: 'whether a graph fits an arena of 64 MiB', command: 'tensorpool plan graph.json --capacity 64M' },
];

function readPlanningInput(path: string): { input: PlanningInput; problem: Problem | null } {
  const text = readInput(path);
  let i = 0;
  while (i < text.length && (text[i] === 32 || text[i] === 9 || text[i] === 10 || text[i] === 13)) i++;
  if (text[i] === 123) {
    // A graph, or else a Chrome trace (read as a trace below).
    const json = parseJson(text.toString('utf8'), path) as Record<string, unknown>;
    if (json && typeof json === 'object' && ('operators' in json || 'conflicts' in json)) {
      return { input: json as unknown as OperatorGraph | ConflictProblem, problem: null };
    }
  }
  const problem = readProblem(path);
  return { input: problem, problem };
}

export const planCommand: Command = {
  name: 'plan',
  summary: 'plan static offsets for a problem or trace (S1, S2, S3, greedy, best)',
  usage,
  run(argv) {
    const { values, flags, positionals } = parseCommand(
      argv,
      {
        strategy: { type: 'string' },
        'time-limit': { type: 'string' },
        capacity: { type: 'string' },
        output: { type: 'string', short: 'o' },
        svg: { type: 'string' },
        json: { type: 'string' },
      },
      usage,
      ['output', 'svg', 'json'],
    );
    if (flags.help) return void console.log(withExamples(usage, examples));
    const path = onePositional(positionals, 'problem file', usage);
    const strategy = oneOf<Strategy>(values.strategy, '--strategy', STRATEGIES, 'best');
    const timeLimitMs = integerOption(values['time-limit'], '--time-limit', 10000, 1);
    const capacity = values.capacity === undefined ? undefined : bytesOption(values.capacity, '--capacity');
    const { input, problem } = readPlanningInput(path);
    const layout = planOffsets(input, { strategy, timeLimitMs, capacity });
    const ratio = layout.lowerBound > 0 ? layout.peak / layout.lowerBound : 1;
    console.log(formatTable(['', ''], [
      ['problem', `${path} (${layout.sizes.length} buffers)`],
      ['strategy', strategy],
      ['height', `${formatBytes(layout.peak)} (${layout.peak} B)`],
      ['lower bound', `${formatBytes(layout.lowerBound)} (${layout.lowerBound} B${layout.lowerBoundExact ? '' : ', a clique found: the search was cut short'})`],
      ['ratio', `${round(ratio, 5)}x the lower bound${layout.optimal ? ' (optimal)' : ''}`],
      ['valid', layout.valid ? 'yes: no two conflicting buffers overlap' : 'NO'],
      ...(layout.capacity === null ? [] : [['capacity', `${layout.capacity} B: ${layout.fitsCapacity ? 'fits' : 'does not fit'}`]]),
      ['time', `${round(layout.ms, 1)} ms`],
      ['how', layout.notes],
    ]).split('\n').slice(2).join('\n'));
    if (!layout.valid) throw new CliError(`the layout failed verification: ${layout.notes}`, 1);
    if (values.output) writeFileAtomic(values.output, solutionCsv(layout, problem));
    if (values.svg) writeFileAtomic(values.svg, layoutSvg(layout, problem, `${strategy} on ${path}`));
    writeJsonFile(values.json, {
      problem: path,
      strategy,
      buffers: layout.sizes.length,
      peak: layout.peak,
      lowerBound: layout.lowerBound,
      lowerBoundExact: layout.lowerBoundExact,
      ratio,
      optimal: layout.optimal,
      valid: layout.valid,
      ms: layout.ms,
      capacity: layout.capacity,
      fitsCapacity: layout.fitsCapacity,
      notes: layout.notes,
    });
  },
};

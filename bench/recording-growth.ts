/**
 * Whether a long-running program's pool grows because its live bytes do or because its free memory fragments:
 * a recording of it (`tensorpool run --record FILE -- ...`, its serving part: what start-up left live, then
 * every event from the first iteration mark) is cut at fractions of its iteration marks, and each prefix is
 * replayed through the default classes' spans as `tensorpool run` serves them with no plan
 * (plan/spans.ts replayThroughSpans: bookkeeping only, no decay). Per prefix: the live peak (the bytes the
 * recorded requests held at most: the lower bound of any allocator), the bytes the spans carved for it, and
 * the difference (fragmentation and page rounding). Then what was live at the whole recording's peak, by how
 * many iteration marks ago it was allocated: 0, the iteration under way (tensors of the runs in flight); 1-15;
 * 16 or more (what the program keeps: weights, caches). Deterministic: the recorded order, no timing.
 *
 *   npm run build && npx tsx bench/recording-growth.ts RECORDING.csv [--at 0.1,0.2,0.5,1] [--json out.json]
 */
import { replayThroughSpans, servingPart } from '../dist/plan/spans.js';
import { formatBytes, formatTable } from '../dist/report/table.js';
import { readTrace } from '../dist/trace/read.js';
import { EventOp, TraceBuilder, type Trace } from '../dist/trace/trace.js';
import { benchArgs, optionChecks, writeJson } from './harness.js';

const args = benchArgs(1, { at: { type: 'string' } });
const fail: (message: string) => never = optionChecks('recording-growth', args).fail;
if (args.positionals.length !== 1) fail('give one recording (tensorpool run --record FILE)');
const fractions = String(args.values.at ?? '0.1,0.2,0.5,1')
  .split(',')
  .map((text) => {
    const f = Number(text);
    if (!(f > 0 && f <= 1)) fail(`--at takes fractions in (0, 1] separated by commas, got ${JSON.stringify(text)}`);
    return f;
  });

function read(file: string): Trace {
  try {
    return servingPart(readTrace(file));
  } catch (error) {
    return fail((error as Error).message);
  }
}
const trace = read(args.positionals[0]);
const ops = trace.ops;
const marks: number[] = [];
for (let e = 0; e < ops.length; e++) if (ops[e] === EventOp.Iteration) marks.push(e);
if (marks.length === 0) fail('the recording has no iteration mark: nothing to cut it at');

/** The first `end` events of the trace as a trace of their own, and the most bytes they held live at once. */
function prefix(end: number): { part: Trace; livePeak: number } {
  const builder = new TraceBuilder();
  const ids = new Map<number, number>();
  let live = 0;
  let livePeak = 0;
  for (let e = 0; e < end; e++) {
    const buffer = trace.eventBuffer[e];
    if (ops[e] === EventOp.Iteration) builder.mark();
    else if (ops[e] === EventOp.Alloc) {
      ids.set(buffer, builder.alloc(trace.sizes[buffer], trace.eventStream[e]));
      live += trace.sizes[buffer];
      livePeak = Math.max(livePeak, live);
    } else if (ids.has(buffer)) {
      builder.free(ids.get(buffer)!, trace.eventStream[e]);
      ids.delete(buffer);
      live -= trace.sizes[buffer];
    }
  }
  return { part: builder.build(`${trace.name} (first ${end} events)`, trace.format), livePeak };
}

/** What was live at the trace's live peak, in bytes, by the marks since each block's allocation. */
function liveAtPeak(): { at: number; sinceMark: number; recent: number; kept: number } {
  let live = 0;
  let peak = 0;
  let peakAt = 0;
  const live0 = new Map<number, number>();
  for (let e = 0; e < ops.length; e++) {
    const buffer = trace.eventBuffer[e];
    if (ops[e] === EventOp.Alloc) {
      live0.set(buffer, e);
      live += trace.sizes[buffer];
      if (live > peak) [peak, peakAt] = [live, e];
    } else if (ops[e] === EventOp.Free && live0.delete(buffer)) live -= trace.sizes[buffer];
  }
  const born = new Map<number, number>(); // live at the peak: block -> marks before it when allocated
  let marksSoFar = 0;
  for (let e = 0; e <= peakAt; e++) {
    const buffer = trace.eventBuffer[e];
    if (ops[e] === EventOp.Iteration) marksSoFar++;
    else if (ops[e] === EventOp.Alloc) born.set(buffer, marksSoFar);
    else if (ops[e] === EventOp.Free) born.delete(buffer);
  }
  const out = { at: peakAt / ops.length, sinceMark: 0, recent: 0, kept: 0 };
  for (const [buffer, marksBefore] of born) {
    const age = marksSoFar - marksBefore;
    if (age === 0) out.sinceMark += trace.sizes[buffer];
    else if (age < 16) out.recent += trace.sizes[buffer];
    else out.kept += trace.sizes[buffer];
  }
  return out;
}

const rows = fractions.map((fraction) => {
  const end = fraction >= 1 ? ops.length : marks[Math.max(0, Math.floor(fraction * marks.length) - 1)] + 1;
  const { part, livePeak } = prefix(end);
  const replay = replayThroughSpans(part);
  if (replay.osFallbacks !== 0) fail(`the replay of the first ${end} events went to the OS ${replay.osFallbacks} times: no measure`);
  return { fraction, events: end, livePeak, carved: replay.carvedBytes };
});
const peak = liveAtPeak();
console.log(`# ${args.positionals[0]}: ${ops.length} events, ${marks.length} iteration marks (serving part)`);
console.log(
  formatTable(
    ['marks', 'events', 'live peak', 'carved by spans', 'carved - live peak'],
    rows.map((r) => [`${Math.round(100 * r.fraction)}%`, r.events, formatBytes(r.livePeak), formatBytes(r.carved), formatBytes(r.carved - r.livePeak)]),
  ),
);
console.log(
  `# live at the recording's peak (${(100 * peak.at).toFixed(1)}% of its events): ${formatBytes(peak.sinceMark)} allocated since the last mark, ` +
    `${formatBytes(peak.recent)} 1-15 marks before, ${formatBytes(peak.kept)} 16 or more`,
);
writeJson(args.json, { recording: args.positionals[0], events: ops.length, marks: marks.length, rows, liveAtPeak: peak });

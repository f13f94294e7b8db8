import { readTrace } from '../trace/read.js';
import { formatBytes, formatTable } from '../report/table.js';
import { onePositional, parseCommand, withExamples, writeJsonFile, type Command, type Example } from './common.js';

const usage = `usage: tensorpool info <trace> [--json FILE]

Reads a trace (tensorpool CSV, torch.profiler Chrome trace or MiniMalloc CSV; plain or gzip) and prints
its summary: events, buffers, iterations, sizes, bytes, the lower bound, and any anomalies counted.`;

const examples: Example[] = [
  { what: 'a recording of `tensorpool run --record app.csv -- node app.js`', command: 'tensorpool info app.csv' },
  { what: 'a torch.profiler trace, the summary also as JSON', command: 'tensorpool info step.json.gz --json step.info.json' },
];

export const infoCommand: Command = {
  name: 'info',
  summary: 'summarise a trace',
  usage,
  run(argv) {
    const { values, flags, positionals } = parseCommand(argv, { json: { type: 'string' } }, usage, ['json']);
    if (flags.help) return void console.log(withExamples(usage, examples));
    const path = onePositional(positionals, 'trace file', usage);
    const s = readTrace(path).summary();
    const q = s.sizeQuantiles;
    console.log(formatTable(['', ''], [
      ['trace', `${path} (${s.format})`],
      ['events', `${s.events} (${s.allocs} allocs, ${s.frees} frees, ${s.iterations} iteration(s))`],
      ['buffers', `${s.buffers} (${s.neverFreed} never freed, ${formatBytes(s.bytesNeverFreed)})`],
      ['distinct sizes', s.distinctSizes],
      ['sizes', `min ${q.min}, median ${q.median}, p90 ${q.p90}, p99 ${q.p99}, max ${q.max} B`],
      ['bytes allocated', `${formatBytes(s.bytesAllocated)} (${s.bytesAllocated} B)`],
      ['lower bound', `${formatBytes(s.lowerBound)} (${s.lowerBound} B): the most bytes live at once`],
      ['anomalies', Object.entries(s.anomalies).map(([k, v]) => `${k} ${v}`).join(', ')],
    ]).split('\n').slice(2).join('\n'));
    writeJsonFile(values.json, s);
  },
};

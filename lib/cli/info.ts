import fs from 'node:fs';

import { preloadLibrary } from '../process/process-pool.js';
import { readTrace } from '../trace/read.js';
import { formatBytes, formatTable } from '../report/table.js';
import { CliError, onePositional, parseCommand, withExamples, writeJsonFile, type Command, type Example } from './common.js';

const usage = `usage: tensorpool info <trace> [--json FILE]
       tensorpool info --library

Reads a trace (tensorpool CSV, torch.profiler Chrome trace or MiniMalloc CSV; plain or gzip) and prints
its summary: events, buffers, iterations, sizes, bytes, the lower bound, and any anomalies counted.

  --json FILE         write the summary as JSON
  --library           print the path of the preload library (what 'tensorpool run' puts in LD_PRELOAD),
                      and nothing else: to run a program under it without Node, LD_PRELOAD=<path> program`;

const examples: Example[] = [
  { what: 'a recording of `tensorpool run --record app.csv -- node app.js`', command: 'tensorpool info app.csv' },
  { what: 'a torch.profiler trace, the summary also as JSON', command: 'tensorpool info step.json.gz --json step.info.json' },
  { what: 'where the preload library is, for LD_PRELOAD in a Dockerfile or a systemd unit', command: 'tensorpool info --library' },
];

export const infoCommand: Command = {
  name: 'info',
  summary: "summarise a trace (--library: print the preload library's path)",
  usage,
  run(argv) {
    const { values, flags, positionals } = parseCommand(argv, { json: { type: 'string' }, library: { type: 'boolean' } }, usage, ['json']);
    if (flags.help) return void console.log(withExamples(usage, examples));
    if (flags.library) {
      if (positionals.length || values.json !== undefined) throw new CliError("--library takes no trace and no --json ('tensorpool info --help')");
      if (!fs.existsSync(preloadLibrary)) throw new CliError(`the preload library is not built (${preloadLibrary}): run npm run build:native`);
      console.log(preloadLibrary);
      // The dynamic loader splits LD_PRELOAD at spaces and colons, with no way to escape them.
      if (/[\s:]/.test(preloadLibrary)) console.error('tensorpool: this path has a space or a colon, which LD_PRELOAD cannot hold: copy the file to a path without them');
      return;
    }
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

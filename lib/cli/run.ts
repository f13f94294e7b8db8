import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { Plan } from '../plan.js';
import { preloadLibrary } from '../process-pool.js';
import { bytesOption, CliError, parseCommand, type Command } from './common.js';

const usage = `usage: tensorpool run [--plan FILE | --record FILE | --adaptive] [--min-bytes N] [--stats] -- <command...>

Runs a command (node app.js, python train.py, ...) with tensorpool's preload library in front of the C
library: every malloc, calloc, realloc and aligned allocation of at least --min-bytes (default 64K) in the
whole process, from any thread, is served by one process pool. Smaller requests go to the C library,
whose heap then keeps its top (trim threshold 64 MiB, mmap threshold 32 MiB) unless MALLOC_TRIM_THRESHOLD_,
MALLOC_MMAP_THRESHOLD_ or GLIBC_TUNABLES set them.
  (no mode)        the default classes, grown on demand: no page fault once a size has been seen
  --plan FILE      a plan from 'tensorpool train' (classes and schedule from the start); a plan trained
                   on a recording of this library serves the program recorded ("node app.js": the
                   executable's and the first non-option argument's names): where the command starts
                   others (npm, a shell), the rest serve the default classes and map none of its arena
  --record FILE    record the pool-routed allocations and write them to FILE (tensorpool CSV, the
                   allocating thread as the stream) at exit; where the command starts others (npm, a
                   shell), FILE keeps the largest recording; with %p in FILE each process that used
                   the pool writes its own file, %p its pid
  --adaptive       in Node, processPool() records, trains (on a worker thread) and switches at its
                   markIteration() calls
  --min-bytes N    the threshold (TENSORPOOL_MIN_BYTES), such as 4096, 64K, 1M
  --stats          print the pool's counters on stderr at exit (also from the processes the command
                   starts whose pool served something)
The command's exit code is returned (128 + the signal number when a signal ended it).
Workflow: run --record trace.csv, then 'tensorpool train trace.csv -o plan.json', then run --plan plan.json.`;

/**
 * The environment `tensorpool run` gives its command: `base` without its TENSORPOOL_ settings (but
 * TENSORPOOL_RESERVE), then `settings`, and the preload library first in LD_PRELOAD (before base's own).
 */
export function runEnvironment(base: NodeJS.ProcessEnv, settings: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...base };
  for (const key of Object.keys(env)) if (key.startsWith('TENSORPOOL_') && key !== 'TENSORPOOL_RESERVE') delete env[key];
  Object.assign(env, settings);
  env.LD_PRELOAD = [preloadLibrary, base.LD_PRELOAD].filter(Boolean).join(':');
  return env;
}

/** Splits `tensorpool run` arguments into its own options and the command (after '--' or the first word). */
function splitCommand(argv: string[]): [string[], string[]] {
  const dashes = argv.indexOf('--');
  if (dashes >= 0) return [argv.slice(0, dashes), argv.slice(dashes + 1)];
  const withValue = new Set(['--plan', '--record', '--min-bytes']);
  for (let i = 0; i < argv.length; i++) {
    if (!argv[i].startsWith('-')) return [argv.slice(0, i), argv.slice(i)];
    if (withValue.has(argv[i])) i++;
  }
  return [argv, []];
}

export const runCommand: Command = {
  name: 'run',
  summary: 'run a command with the process pool preloaded (its malloc served by tensorpool)',
  usage,
  run(argv) {
    const [own, command] = splitCommand(argv);
    const options = {
      plan: { type: 'string' },
      record: { type: 'string' },
      adaptive: { type: 'boolean' },
      'min-bytes': { type: 'string' },
      stats: { type: 'boolean' },
    } as const;
    const { values, flags, positionals } = parseCommand(own, options, usage, ['record']);
    if (flags.help) return void console.log(usage);
    if (positionals.length) throw new CliError(`unexpected argument '${positionals[0]}'\n\n${usage}`);
    if (command.length === 0) throw new CliError(`no command to run\n\n${usage}`);
    if (!fs.existsSync(preloadLibrary)) {
      throw new CliError(`the preload library is not built (${preloadLibrary}): run npm run build:native`);
    }
    const settings: Record<string, string> = {};
    if (values.plan !== undefined) {
      Plan.read(values.plan); // a bad plan is refused here, with its reason, before the command starts
      settings.TENSORPOOL_PLAN = path.resolve(values.plan);
    }
    if (values.record !== undefined) {
      settings.TENSORPOOL_RECORD = path.resolve(values.record);
    }
    if (flags.adaptive) settings.TENSORPOOL_ADAPTIVE = '1';
    if (flags.stats) settings.TENSORPOOL_STATS = '1';
    if (values['min-bytes'] !== undefined) settings.TENSORPOOL_MIN_BYTES = String(bytesOption(values['min-bytes'], '--min-bytes'));
    const env = runEnvironment(process.env, settings);

    return new Promise<number>((resolve, reject) => {
      const child = spawn(command[0], command.slice(1), { stdio: 'inherit', env });
      const forward = (signal: NodeJS.Signals) => child.kill(signal);
      const signals: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP'];
      signals.forEach((s) => process.on(s, forward));
      child.on('error', (error: NodeJS.ErrnoException) => {
        signals.forEach((s) => process.off(s, forward));
        reject(new CliError(`cannot run ${command[0]}: ${error.code === 'ENOENT' ? 'command not found' : error.message}`, 127));
      });
      child.on('exit', (code, signal) => {
        signals.forEach((s) => process.off(s, forward));
        resolve(code ?? 128 + (signal ? os.constants.signals[signal] : 0));
      });
    });
  },
};

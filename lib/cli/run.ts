import fs from 'node:fs';
import path from 'node:path';

import { native, packageRoot } from '../native.js';
import { Plan } from '../plan/plan.js';
import { preloadLibrary } from '../process/process-pool.js';
import { bytesOption, checkOutputFile, CliError, parseCommand, usageError, withExamples, type Command, type Example } from './common.js';
import { callerEnvironment, callerState, execCommand, writeError, type CallerState } from './exec.js';
import { didYouMean } from './suggest.js';
import { PEERS, findLibrary } from '../replay/allocators.js';
import { listSafePath } from './list-safe-path.js';

const usage = `usage: tensorpool run [--plan FILE | --record FILE | --adaptive] [--min-bytes N] [--with ALLOCATOR]
                     [--decay MS] [--collect-after SIZE] [--stats] [--no-hooks] [--no-decay-thread] -- <command...>

Runs a command (node app.js, python train.py, ...) with tensorpool's preload library in front of the C
library: every malloc, calloc, realloc and aligned allocation of at least --min-bytes (default 64K) in the
whole process, from any thread, is served by one process pool. Smaller requests go to the C library,
whose trim and mmap thresholds rise with the pool's blocks as glibc's own rise with the chunks it maps
(unless MALLOC_TRIM_THRESHOLD_, MALLOC_MMAP_THRESHOLD_ or GLIBC_TUNABLES set them).
  (no mode)        the default classes, grown on demand: requests of 64 KiB to 64 MiB share spans of one
                   arena (memory one size freed serves the next); no page fault once a size has been seen
  --plan FILE      a plan from 'tensorpool train' (classes and schedule from the start, or, a plan of
                   the spans kind, the default classes' spans with the memory the recording needed kept
                   resident once written); a plan trained on a recording of this library serves the
                   program recorded ("node app.js", "python3 train.py", "python3 -m module", "node -e":
                   the executable's name and what it runs, options and their values skipped): where
                   the command starts others (npm, a shell), the rest serve the default classes, map
                   none of its arena and read the plan no further than its program. A plan whose arena
                   is larger than this machine's memory is refused with one line on stderr, and the C
                   library serves
  --record FILE    record the pool-routed allocations and write them to FILE (tensorpool CSV, the
                   allocating thread as the stream) at exit, through a temporary file renamed over it:
                   a previous FILE stays whole until the new one is complete, then stays as
                   FILE.old (SIGINT or SIGTERM ending the program writes it too; SIGKILL writes
                   nothing). FILE must be a regular file or a new name. Where the
                   command starts others (npm, a shell), FILE keeps the run's largest recording; with
                   %p in FILE each process writes its own file (empty where it made no pool), %p its pid
  --adaptive       in Node, processPool() records, trains (on a worker thread) and switches at its
                   markIteration() calls: a plan of the input shapes seen so far, extended when a new
                   one appears, shrunk when one no longer does
  --min-bytes N    the threshold (TENSORPOOL_MIN_BYTES), such as 256K or 1M: at least the pool's floor, 64K
                   (its span size), the default; a smaller one is refused
  --with ALLOCATOR below the threshold, this allocator serves instead of the C library's malloc: jemalloc,
                   mimalloc, tcmalloc (Debian's libjemalloc2, libmimalloc2.0, libtcmalloc-minimal4) or the
                   path of an allocator's shared library (also TENSORPOOL_WITH). It is preloaded after
                   tensorpool's library; each block is freed by the allocator that made it
  --decay MS       a free block of the default classes not used for MS milliseconds (and for 16
                   iteration marks, where the program marks them) gives its memory back to the OS
                   (TENSORPOOL_DECAY_MS; default 1000; off: never). Blocks reused every iteration never are;
                   where memory given back is soon used again, the period doubles (up to 64 times). In a
                   program with threads of its own, a thread of the library's does this while the program
                   is quiet; one without threads gets it back before a sleep of at least MS, once a wait
                   on descriptors (poll, select, epoll_wait) has lasted MS, or after short sleeps and
                   timeouts that add up to it; else at its next call
  --no-decay-thread  no such thread (TENSORPOOL_DECAY_THREAD=0): a quiet program's freed memory goes back at
                   its next call
  --collect-after SIZE
                   in Node, before a run of a hooked session, where the thread's ArrayBuffers have grown by
                   SIZE (or by twice what its runs in flight make, where more; at most 64 MiB) since the
                   last collection, V8 collects its young generation: the dead input and
                   output tensors' memory goes back to the pool instead of waiting for V8 to collect on its
                   own, about 64 MiB later (TENSORPOOL_COLLECT_AFTER; default 4M; off: never). Also the
                   default of a PooledSession's collectAfter option
  --stats          print the pool's counters on stderr at exit (also from the processes the command
                   starts; one that made no pool says so)
  --no-hooks       leave the runtimes alone (also TENSORPOOL_HOOKS=0). By default Node processes get a hook
                   (NODE_OPTIONS --require): onnxruntime-node sessions run with ONNX Runtime's arena and
                   memory pattern off unless the app set them, the pool's free memory goes back to the OS
                   once a session's create() resolves (what loading the model used and freed), and each
                   run() marks an iteration and frees dead tensors first (--collect-after); none for a
                   node command given --permission, which would deny reading it. Python
                   processes get a sitecustomize (PYTHONPATH) that marks one at each torch optimizer step()
As glibc: a request the machine cannot commit fails (NULL, ENOMEM), calloc writes no fresh mapping,
malloc_trim() gives free memory back (the pool's free blocks too), an invalid or double free aborts with
glibc's message, fork() is safe from any thread and from a signal handler (the library adds no thread to a
program that has none, so glibc's single-threaded fork stays as it was); under ulimit -v the pool
reserves an eighth of the address space left and grows in place as it needs, and gives back what it does
not use to a request that fails or to a lower limit the program sets itself (setrlimit).
The command runs in place of tensorpool (exec): it keeps the pid, process group and terminal, every signal
reaches it alone, and its exit status, a signal included, is what the caller sees. Signals the caller
ignored or blocked (nohup, a shell's trap ''), its limits and descriptors are the command's as they were,
from its first instant, where tensorpool is started by its own command (bin/tensorpool, what npm installs),
not by 'node main.js'.
Workflow: run --record trace.csv, then 'tensorpool train trace.csv -o plan.json', then run --plan plan.json.`;

/** The examples that end `tensorpool run --help` (kept apart from the usage above). */
const RUN_EXAMPLES: Example[] = [
  { what: 'a Node app under the process pool, its counters printed at exit', command: 'tensorpool run --stats -- node app.js' },
  { what: 'record a run, then train a plan from the recording', command: 'tensorpool run --record app.csv -- node app.js && tensorpool train app.csv -o app.plan.json' },
  { what: 'run with the plan (any command: a PyTorch script here)', command: 'tensorpool run --plan app.plan.json -- python3 train.py' },
];

/**
 * `text` for the preload library's option `name`, checked by the library's own parser (native/preload/options.h:
 * one grammar for both); a refusal in the CLI's words, with `flag`: "--min-bytes must be a byte count …, got
 * "lots"", "--min-bytes 4K is below the pool's floor, 64K (…)"; without (the variable set by the caller), the
 * library's own: "TENSORPOOL_MIN_BYTES=lots is not a byte count …".
 */
function preloadSetting(name: string, flag: string | null, text: string): string {
  const value = text.trim();
  const refusal = native.checkPreloadOption(name, value);
  if (refusal === null) return value;
  if (flag === null) throw new CliError(refusal);
  const said = `${name}=${value} `;
  const what = refusal.startsWith(said) ? refusal.slice(said.length) : refusal;
  if (what.startsWith('is not ')) throw new CliError(`${flag} ${what.replace(/^is not /, 'must be ')}, got ${JSON.stringify(text)}`);
  throw new CliError(`${flag} ${value} ${what}`);
}

/** The environment variables the preload library reads, from its own table, as `run --help` lists them. */
function environmentHelp(): string {
  const lines = native.preloadOptions().map((o) => {
    const set = [o.flag ? `set by ${o.flag}` : '', o.fallback !== null ? `default ${o.fallback}` : ''].filter(Boolean).join('; ');
    return `  ${o.name}\n      ${o.help}${set ? ` (${set})` : ''}`;
  });
  const runs = [
    ['TENSORPOOL_WITH', 'the allocator below the threshold (--with; read by tensorpool run)'],
    ['TENSORPOOL_HOOKS', '0: no runtime hooks (--no-hooks; read by tensorpool run)'],
    ['TENSORPOOL_COLLECT_AFTER', "the Node hook's collection threshold (set by --collect-after; default 4M)"],
  ].map(([name, help]) => `  ${name}\n      ${help}`);
  return [
    'Environment (what the options above set; with the library in LD_PRELOAD, set them by hand). tensorpool run',
    'also takes them from its own environment, checked, its options winning; inside another run (a command of',
    "one, TENSORPOOL_ROOT_PID set) only its options count:",
    ...lines,
    ...runs,
  ].join('\n');
}

/**
 * The shared library `--with` names: a peer by name, found by its usual soname (one line naming its Debian
 * package where it is missing), or a path to one.
 */
export function nextAllocatorLibrary(given: string, source = '--with'): string {
  const names = Object.keys(PEERS);
  if (given in PEERS) {
    const peer = PEERS[given as keyof typeof PEERS];
    const library = findLibrary(peer.soname);
    if (!library) throw new CliError(`${source} ${given}: ${peer.soname} is not installed (on Debian: apt-get install ${peer.package})`);
    return library;
  }
  if (!given.includes('/')) throw new CliError(`${source} must be one of ${names.join(', ')} or the path of an allocator's shared library, got ${JSON.stringify(given)}${didYouMean(given, names)}`);
  const stat = fs.statSync(given, { throwIfNoEntry: false });
  if (!stat?.isFile()) throw new CliError(`${source} ${given}: ${stat ? 'not a regular file' : 'no such file'} (the path of an allocator's shared library)`);
  const head = Buffer.alloc(4);
  const fd = fs.openSync(given, 'r');
  try {
    fs.readSync(fd, head, 0, 4, 0);
  } finally {
    fs.closeSync(fd);
  }
  if (!head.equals(Buffer.from([0x7f, 0x45, 0x4c, 0x46]))) throw new CliError(`${source} ${given}: not a shared library (no ELF header)`);
  return path.resolve(given);
}

/** The largest plan file the preload library reads (native/preload/plan_file.cc). */
const MAX_PLAN_BYTES = 256 * 2 ** 20;

/**
 * The environment `tensorpool run` gives its command: `base` without its TENSORPOOL_ settings (but
 * TENSORPOOL_RESERVE), then `settings`, the preload library first in LD_PRELOAD (before base's own), and
 * with `hooks` the runtime hooks (PYTHONPATH, and NODE_OPTIONS unless `withNodeHook` is false).
 */
export function runEnvironment(
  base: NodeJS.ProcessEnv,
  settings: Record<string, string> = {},
  hooks = true,
  withNodeHook = hooks,
  nextAllocator?: string,
): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...base };
  for (const key of Object.keys(env)) if (key.startsWith('TENSORPOOL_') && key !== 'TENSORPOOL_RESERVE') delete env[key];
  Object.assign(env, settings);
  env.LD_PRELOAD = [listSafePath(preloadLibrary), nextAllocator && listSafePath(nextAllocator), base.LD_PRELOAD].filter(Boolean).join(':');
  if (hooks) Object.assign(env, hookEnvironment(base, withNodeHook));
  return env;
}

/**
 * Splits `tensorpool run` arguments into its own options and the command: after the first '--' among the
 * options, or from the first word that is not one (a '--' of the command's own stays the command's).
 */
function splitCommand(argv: string[]): [string[], string[]] {
  const withValue = new Set(['--plan', '--record', '--min-bytes', '--with', '--decay', '--collect-after']);
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--') return [argv.slice(0, i), argv.slice(i + 1)];
    if (!argv[i].startsWith('-')) return [argv.slice(0, i), argv.slice(i)];
    if (withValue.has(argv[i])) i++;
  }
  return [argv, []];
}

/** The hooks' file (Node) and directory (Python's sitecustomize). */
export const nodeHook = path.join(packageRoot, 'dist/hooks/node.js');
export const pythonHooks = path.join(packageRoot, 'hooks/python');

/**
 * NODE_OPTIONS and PYTHONPATH with the hooks put before what `env` has: only node reads NODE_OPTIONS and only
 * python PYTHONPATH, so other programs never see them. The Node hook comes first so that it is installed
 * before a --require of the user's own (which may create a session at once), and once: a nested
 * `tensorpool run` or a child started with its parent's environment adds it no second time.
 */
function hookEnvironment(env: NodeJS.ProcessEnv, withNodeHook: boolean): { NODE_OPTIONS?: string; PYTHONPATH: string } {
  const out: { NODE_OPTIONS?: string; PYTHONPATH: string } = { PYTHONPATH: [listSafePath(pythonHooks), env.PYTHONPATH].filter(Boolean).join(path.delimiter) };
  // Run from the sources unbuilt, there is no compiled hook: node would refuse to start with a missing --require.
  if (withNodeHook && fs.existsSync(nodeHook)) {
    // NODE_OPTIONS splits at spaces except within double quotes, where a backslash escapes the next character.
    const hook = `--require "${nodeHook.replace(/[\\"]/g, '\\$&')}"`;
    const given = env.NODE_OPTIONS ?? '';
    out.NODE_OPTIONS = given.includes(hook) ? given : [hook, given].filter(Boolean).join(' ');
  }
  return out;
}

/** Node's permission model (--permission, --experimental-permission) denies reading the hook, and node would not start. */
const NODE_PERMISSION = /^--(experimental-)?permission$/;

/**
 * Whether `command` starts node under its permission model: then it gets no Node hook. (With the model in
 * NODE_OPTIONS, `tensorpool run` itself reads its files only where the user allowed it: so may the hook.)
 */
function nodeWithPermissions(command: string[]): boolean {
  if (!/^node(\d+)?$/.test(path.basename(command[0])) && command[0] !== process.execPath) return false;
  return command.slice(1).some((option) => NODE_PERMISSION.test(option));
}

/** A setting for the preload library: its value, and where it came from (an option, or the variable itself). */
interface Setting {
  source: string;
  value: string;
}

/** The modes, one at a time: a plan, a recording, adaptive. */
const MODES = ['TENSORPOOL_PLAN', 'TENSORPOOL_RECORD', 'TENSORPOOL_ADAPTIVE'];

/**
 * The TENSORPOOL_ variables the caller set itself, by name: those of the preload library's table, and
 * TENSORPOOL_COLLECT_AFTER (the Node hook's). None inside another run (TENSORPOOL_ROOT_PID names a process of
 * this tree other than this one): a run started by a command of another run is a run of its own, as its options say.
 */
function callerSettings(env: NodeJS.ProcessEnv, caller: CallerState): Record<string, Setting> {
  const root = env.TENSORPOOL_ROOT_PID;
  if (root !== undefined && root !== String(process.pid) && root !== String(caller.launcher)) return {};
  const out: Record<string, Setting> = {};
  for (const name of [...native.preloadOptions().map((o) => o.name), 'TENSORPOOL_COLLECT_AFTER']) {
    const value = env[name];
    if (value !== undefined && value !== '') out[name] = { source: `${name} (in the environment)`, value };
  }
  return out;
}

/** What the options set, by variable. */
function optionSettings(values: Record<string, string | undefined>, flags: Record<string, boolean>): Record<string, Setting> {
  const out: Record<string, Setting> = {};
  const set = (name: string, source: string, value: string | undefined) => {
    if (value !== undefined) out[name] = { source, value };
  };
  set('TENSORPOOL_PLAN', '--plan', values.plan);
  set('TENSORPOOL_RECORD', '--record', values.record);
  set('TENSORPOOL_ADAPTIVE', '--adaptive', flags.adaptive ? '1' : undefined);
  set('TENSORPOOL_STATS', '--stats', flags.stats ? '1' : undefined);
  set('TENSORPOOL_DECAY_THREAD', '--no-decay-thread', flags['no-decay-thread'] ? '0' : undefined);
  set('TENSORPOOL_MIN_BYTES', '--min-bytes', values['min-bytes']);
  set('TENSORPOOL_DECAY_MS', '--decay', values.decay);
  set('TENSORPOOL_COLLECT_AFTER', '--collect-after', values['collect-after']);
  return out;
}

/** `value` of variable `name` as the command gets it, checked (a refusal names `source`, the option or the variable). */
function checkedSetting(name: string, source: string, value: string): string {
  const flag = source.startsWith('--');
  const shown = flag ? `${source} ${value}` : `${name}=${value}`;
  if (name === 'TENSORPOOL_PLAN') {
    // As the preload library reads it: a regular file (/dev/zero was read until memory ran out) of at most 256 MiB.
    const stat = fs.statSync(value, { throwIfNoEntry: false });
    if (stat && !stat.isFile()) throw new CliError(`${shown}: not a regular file (a plan is a file that 'tensorpool train' wrote)`);
    if (stat && stat.size > MAX_PLAN_BYTES) throw new CliError(`${shown}: the file is ${stat.size} bytes; a plan may be at most 256 MiB`);
    try {
      Plan.read(value); // a bad plan is refused here, with its reason, before the command starts
    } catch (error) {
      if (flag) throw error;
      throw new CliError(`${name}: ${(error as Error).message}`);
    }
    return path.resolve(value);
  }
  if (name === 'TENSORPOOL_RECORD') {
    // Written at exit through a temporary file renamed over it: a FIFO or a device cannot take it.
    if (fs.existsSync(value) && !fs.statSync(value).isFile()) throw new CliError(`${shown}: not a regular file (a recording is written to a regular file)`);
    if (!flag) checkOutputFile(value, name); // as parseCommand checks --record's
    return path.resolve(value);
  }
  if (name === 'TENSORPOOL_COLLECT_AFTER') {
    if (value !== 'off' && !/^\d+([KMG]i?B?)?$/i.test(value.trim())) {
      throw new CliError(`${flag ? source : name} must be a byte count such as 4M, or off, got ${JSON.stringify(value)}`);
    }
    return value === 'off' ? 'off' : String(bytesOption(value, flag ? source : name));
  }
  return preloadSetting(name, flag ? source : null, value);
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
      with: { type: 'string' },
      decay: { type: 'string' },
      'collect-after': { type: 'string' },
      stats: { type: 'boolean' },
      'no-hooks': { type: 'boolean' },
      'no-decay-thread': { type: 'boolean' },
    } as const;
    const { values, flags, positionals } = parseCommand(own, options, usage, ['record']);
    if (flags.help) return void console.log(withExamples(`${usage}\n\n${environmentHelp()}`, RUN_EXAMPLES));
    if (positionals.length) throw usageError(`unexpected argument '${positionals[0]}'`, usage);
    if (command.length === 0) throw usageError('no command to run', usage);
    if (!fs.existsSync(preloadLibrary)) {
      throw new CliError(`the preload library is not built (${preloadLibrary}): run npm run build:addon`);
    }
    const caller = callerState(process.env);
    const hooksSetting = process.env.TENSORPOOL_HOOKS;
    if (hooksSetting !== undefined && hooksSetting !== '' && hooksSetting !== '0' && hooksSetting !== '1') {
      throw new CliError(`TENSORPOOL_HOOKS must be 0 or 1, got ${JSON.stringify(hooksSetting)}`);
    }
    const hooks = !flags['no-hooks'] && hooksSetting !== '0';
    // The caller's own settings, then the options, which win: each checked as the library reads it.
    const given = { ...callerSettings(process.env, caller), ...optionSettings(values, flags) };
    const modes = MODES.filter((mode) => given[mode] !== undefined && given[mode]!.value !== '0');
    if (modes.length > 1) {
      throw new CliError(`${modes.map((mode) => given[mode]!.source).join(' and ')} ask for two modes: give one (a plan, a recording or --adaptive)`);
    }
    const settings: Record<string, string> = {};
    for (const [name, { source, value }] of Object.entries(given)) settings[name] = checkedSetting(name, source, value);
    const withNodeHook = hooks && !nodeWithPermissions(command);
    if (hooks && !withNodeHook) {
      writeError("tensorpool: no Node hook: node's permission model would deny reading it, so sessions keep ONNX Runtime's arena (docs/troubleshooting.md)");
    }
    const withAllocator = values.with ?? process.env.TENSORPOOL_WITH;
    const withSource = values.with !== undefined ? '--with' : 'TENSORPOOL_WITH';
    const nextAllocator = withAllocator === undefined || withAllocator === '' ? undefined : nextAllocatorLibrary(withAllocator, withSource);
    const env = runEnvironment(callerEnvironment(process.env, caller), settings, hooks, withNodeHook, nextAllocator);
    return execCommand(command, env, caller);
  },
};

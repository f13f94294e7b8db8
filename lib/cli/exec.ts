/**
 * How `tensorpool run` becomes the command it runs. Started by its own command (bin/tensorpool, what npm
 * installs), it is a child of the shell the caller started, and hands that shell the line that execs the
 * command (descriptor 3): the command then has the caller's pid, process group, terminal, parent, signals,
 * mask, limits and descriptors, none of which Node ever touched, and its exit status, a signal included,
 * reaches the caller as it is. Started otherwise (`node main.js run`), it execs the command itself (native
 * execProgram), putting back what Node is known to change as it starts (SIGPIPE and SIGXFSZ ignored, SIGUSR1
 * blocked); the descriptors past 2 and the open-files limit stay as Node left them.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { native } from '../native.js';
import { CliError } from './common.js';

/** Who started this CLI for `run`: bin/tensorpool's shell (its pid), or nobody in particular. */
export interface CallerState {
  /** The pid of the shell that execs the command once this process hands it the line, or undefined. */
  launcher?: number;
  /** The launcher's environment as the kernel keeps it (/proc/PID/environ), bytes as given; read once. */
  environ?: Buffer;
}

/**
 * The launcher's pid from TENSORPOOL_LAUNCH, where bin/tensorpool set it for this very process (its parent:
 * a value inherited from elsewhere is not this launch's).
 */
export function callerState(env: NodeJS.ProcessEnv, parent = process.ppid): CallerState {
  const launcher = Number(env.TENSORPOOL_LAUNCH);
  return Number.isSafeInteger(launcher) && launcher === parent ? { launcher, environ: fs.readFileSync(`/proc/${launcher}/environ`) } : {};
}

/** The entries ("NAME=value") of an environ block, as given. */
function environEntries(environ: Buffer): Buffer[] {
  const entries: Buffer[] = [];
  for (let start = 0; start < environ.length; ) {
    const end = environ.indexOf(0, start);
    const stop = end < 0 ? environ.length : end;
    if (environ.indexOf(0x3d, start) > start && environ.indexOf(0x3d, start) < stop) entries.push(environ.subarray(start, stop));
    start = stop + 1;
  }
  return entries;
}

/**
 * The caller's environment as it gave it: the launcher's own, as the kernel keeps it (/proc/PID/environ: the
 * shell's additions, such as PWD, and the NODE_OPTIONS kept from this process, are not in it), in its order;
 * without a launcher, this process's.
 */
export function callerEnvironment(env: NodeJS.ProcessEnv, state: CallerState): NodeJS.ProcessEnv {
  if (state.environ === undefined) return { ...env };
  const out: NodeJS.ProcessEnv = {};
  for (const entry of environEntries(state.environ)) {
    const text = entry.toString('utf8');
    const equals = text.indexOf('=');
    out[text.slice(0, equals)] = text.slice(equals + 1);
  }
  return out;
}

/**
 * Each variable of `env` as the bytes the command gets: the caller's own entry, as given, where `env` has it
 * unchanged (a value that is not UTF-8 reached Node as replacement characters, and goes on as it was given),
 * else the entry in UTF-8.
 */
function environmentBytes(env: NodeJS.ProcessEnv, state: CallerState): Buffer[] {
  const given = new Map<string, Buffer>();
  for (const entry of state.environ ? environEntries(state.environ) : []) given.set(entry.toString('utf8'), entry);
  return Object.entries(env)
    .filter((entry): entry is [string, string] => entry[1] !== undefined)
    .map(([key, value]) => given.get(`${key}=${value}`) ?? Buffer.from(`${key}=${value}`));
}

/** Whether `file` is a regular file this process may execute. */
function executable(file: string): boolean {
  try {
    if (!fs.statSync(file).isFile()) return false;
    fs.accessSync(file, fs.constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * The file `name` runs, as a shell finds it: a name with a slash as it is, else the first executable file of
 * that name in PATH. Fails as a shell does: 127 when there is none, 126 when it is there but cannot be run.
 */
export function findCommand(name: string, searchPath: string | undefined): string {
  if (name.includes('/')) {
    if (!fs.existsSync(name)) throw new CliError(`cannot run ${name}: no such file`, 127);
    if (!executable(name)) throw new CliError(`cannot run ${name}: not an executable file`, 126);
    return name;
  }
  let found: string | undefined;
  for (const dir of (searchPath ?? '/usr/local/bin:/usr/bin:/bin').split(':')) {
    const candidate = path.join(dir || '.', name);
    if (executable(candidate)) return candidate;
    if (found === undefined && fs.existsSync(candidate) && !fs.statSync(candidate).isDirectory()) found = candidate;
  }
  if (found !== undefined) throw new CliError(`cannot run ${name}: ${found} is not executable`, 126);
  throw new CliError(`cannot run ${name}: command not found`, 127);
}

const REASONS: Record<string, string> = {
  EACCES: 'permission denied',
  ENOENT: 'no such file (or its interpreter is missing)',
  E2BIG: 'the arguments and environment are too long',
  ENOMEM: 'out of memory',
  ETXTBSY: 'the file is open for writing',
};

/** `word` quoted for a POSIX shell: as it is, whatever bytes it holds. */
function quoted(word: string | Buffer): Buffer {
  const bytes = typeof word === 'string' ? Buffer.from(word) : word;
  const parts: Buffer[] = [Buffer.from("'")];
  for (let start = 0; ; ) {
    const quote = bytes.indexOf(0x27, start);
    parts.push(bytes.subarray(start, quote < 0 ? bytes.length : quote));
    if (quote < 0) break;
    parts.push(Buffer.from("'\\''"));
    start = quote + 1;
  }
  parts.push(Buffer.from("'"));
  return Buffer.concat(parts);
}

/** The env(1) the launcher's line runs: coreutils', by its path where it is there. */
const ENV = fs.existsSync('/usr/bin/env') ? '/usr/bin/env' : 'env';

/**
 * Runs `command` (its first word found as a shell would) in environment `env`: with a launcher, by handing it
 * the line that execs it, then returning; else by replacing this process. Throws the CliError of a command
 * that cannot be run.
 */
export function execCommand(command: string[], env: NodeJS.ProcessEnv, state: CallerState): void {
  // A name that is not UTF-8 reached Node changed (replacement characters): the launcher's own words are run.
  const file = state.launcher !== undefined && command[0].includes('\uFFFD') ? command[0] : findCommand(command[0], env.PATH);
  if (state.launcher !== undefined) {
    // The command is the launcher's last arguments, run as it has them ("$@"): a word that is not UTF-8 reached
    // Node changed. env(1) takes every word with '=' before the command as a variable: a command named so goes through sh.
    const run = command[0].includes('=') ? ['/bin/sh', '-c', 'exec "$0" "$@"'].map(quoted) : [];
    const words = [ENV, '-i', '--'].map(quoted).concat(environmentBytes(env, state).map(quoted), run);
    const space = Buffer.from(' ');
    const line = [Buffer.from(`shift $(($# - ${command.length})); exec`), ...words, Buffer.from('"$@"\n')];
    fs.writeSync(3, Buffer.concat(line.flatMap((word, i) => (i ? [space, word] : [word]))));
    return;
  }
  const pairs = environmentBytes(env, state).map((entry) => entry.toString('utf8'));
  const errno = native.execProgram(file, command, pairs);
  const name = Object.entries(os.constants.errno).find(([, value]) => value === errno)?.[0] ?? `errno ${errno}`;
  throw new CliError(`cannot run ${command[0]}: ${REASONS[name] ?? name}`, name === 'ENOENT' ? 127 : 126);
}

/**
 * How `tensorpool run` becomes the command it runs. Started by its own command (bin/tensorpool, what npm
 * installs), it is a child of the shell the caller started, and hands that shell the line that execs the
 * command (descriptor 3): the command then has the caller's pid, process group, terminal, parent, signals,
 * mask, limits and descriptors, none of which Node ever touched, and its exit status, a signal included,
 * reaches the caller as it is; its words are the shell's own, and the caller's variables go on as the kernel
 * keeps them for the shell (/proc/PID/environ), bytes and order. Node's messages go to the caller's stdout and
 * stderr as the shell passes them (descriptors 5 and 4; useLauncherOutput). Started otherwise (`node main.js run`), it execs the command itself (native
 * execProgram), putting back what Node is known to change as it starts (SIGPIPE and SIGXFSZ ignored, SIGUSR1
 * blocked); the descriptors past 2 and the open-files limit stay as Node left them.
 */
import { Console } from 'node:console';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';

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
 * a value inherited from elsewhere is not this launch's), or undefined.
 */
function launcherPid(env: NodeJS.ProcessEnv, parent = process.ppid): number | undefined {
  const launcher = Number(env.TENSORPOOL_LAUNCH);
  return Number.isSafeInteger(launcher) && launcher === parent ? launcher : undefined;
}

/** Who started this process: bin/tensorpool's shell for `run`, with the caller's environment, or nobody in particular. */
export function callerState(env: NodeJS.ProcessEnv, parent = process.ppid): CallerState {
  const launcher = launcherPid(env, parent);
  return launcher === undefined ? {} : { launcher, environ: fs.readFileSync(`/proc/${launcher}/environ`) };
}

/** Writes `text` to `fd` as it is, synchronously; a reader that has gone (EPIPE) loses it. */
function writeTo(fd: number, text: Uint8Array): void {
  try {
    fs.writeSync(fd, text);
  } catch {
    // the caller's stdout or stderr closed or gone: the message has nowhere to go
  }
}

/** The descriptor this process's messages go to: the caller's stderr (4 under bin/tensorpool's `run`, else 2). */
let stderrFd = 2;

/**
 * Under bin/tensorpool's `run`, console's output goes to the caller's stdout and stderr as the launcher passes
 * them (descriptors 5 and 4; Node's own 1 and 2 are /dev/null where they are a terminal, whose modes Node would
 * put back as it exits), written synchronously. Elsewhere nothing changes.
 */
export function useLauncherOutput(env: NodeJS.ProcessEnv): void {
  if (launcherPid(env) === undefined) return;
  stderrFd = 4;
  const stream = (fd: number) =>
    new Writable({
      write(chunk: Buffer, _encoding, done) {
        writeTo(fd, chunk);
        done();
      },
    });
  globalThis.console = new Console({ stdout: stream(5), stderr: stream(4) });
}

/**
 * A line for the caller's stderr, written as it is: process.stderr would make a pipe on descriptor 2
 * non-blocking, for the command too.
 */
export function writeError(line: string): void {
  writeTo(stderrFd, Buffer.from(`${line}\n`));
}


/**
 * The caller's environment as it gave it: the launcher's own, as the kernel keeps it (/proc/PID/environ: the
 * shell's additions, such as PWD, and the NODE_OPTIONS kept from this process, are not in it), in its order;
 * without a launcher, this process's.
 */
export function callerEnvironment(env: NodeJS.ProcessEnv, state: CallerState): NodeJS.ProcessEnv {
  if (state.environ === undefined) return { ...env };
  const out: NodeJS.ProcessEnv = {};
  for (const [name, { value }] of givenVariables(state.environ)) {
    // Defined, not assigned: a variable named __proto__ is one as any other.
    Object.defineProperty(out, name, { value: value.toString('utf8'), enumerable: true, writable: true, configurable: true });
  }
  return out;
}

/** A variable of the caller's environment: its name and value as given. */
interface GivenVariable {
  nameBytes: Buffer;
  value: Buffer;
}

/**
 * The variables of an environ block ("NAME=value" entries, each ended by a NUL) by name as Node has it, in the
 * block's order: each name's first entry (the one getenv() finds), as given; an entry without a name is none.
 */
function givenVariables(environ: Buffer): Map<string, GivenVariable> {
  const variables = new Map<string, GivenVariable>();
  for (let start = 0; start < environ.length; ) {
    const end = environ.indexOf(0, start);
    const stop = end < 0 ? environ.length : end;
    const equals = environ.indexOf(0x3d, start);
    if (equals > start && equals < stop) {
      const nameBytes = environ.subarray(start, equals);
      const name = nameBytes.toString('utf8');
      if (!variables.has(name)) variables.set(name, { nameBytes, value: environ.subarray(equals + 1, stop) });
    }
    start = stop + 1;
  }
  return variables;
}

/**
 * Each variable of `env` as the bytes the command gets, the caller's first, in the caller's order, then the
 * others: a variable the caller gave as it gave it where `env` has it unchanged, or ends with it (LD_PRELOAD,
 * PYTHONPATH and NODE_OPTIONS with something put before); else in UTF-8. (A value that is not UTF-8 reached
 * Node as replacement characters, and goes on as it was given.)
 */
function environmentBytes(env: NodeJS.ProcessEnv, state: CallerState): Buffer[] {
  const given = state.environ ? givenVariables(state.environ) : new Map<string, GivenVariable>();
  const names = [...given.keys()].filter((name) => Object.hasOwn(env, name) && env[name] !== undefined);
  names.push(...Object.keys(env).filter((name) => !given.has(name) && env[name] !== undefined));
  return names.map((name) => {
    const value = env[name]!;
    const caller = given.get(name);
    const asGiven = caller?.value.toString('utf8') ?? '';
    if (caller === undefined || !value.endsWith(asGiven)) return Buffer.from(`${name}=${value}`);
    return Buffer.concat([caller.nameBytes, Buffer.from(`=${value.slice(0, value.length - asGiven.length)}`), caller.value]);
  });
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
  if (state.launcher !== undefined) {
    // Found first as a shell would (127, 126), but a name that is not UTF-8, which reached Node changed: env(1) says.
    if (!command[0].includes('\uFFFD')) findCommand(command[0], env.PATH);
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
  const errno = native.execProgram(findCommand(command[0], env.PATH), command, pairs);
  const name = Object.entries(os.constants.errno).find(([, value]) => value === errno)?.[0] ?? `errno ${errno}`;
  throw new CliError(`cannot run ${command[0]}: ${REASONS[name] ?? name}`, name === 'ENOENT' ? 127 : 126);
}

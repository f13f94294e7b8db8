/**
 * How `tensorpool run` becomes the command it runs: it execs it (native execProgram), so that the command
 * has the launcher's pid, process group, terminal and parent, and its exit status, a signal included, reaches
 * the caller as it is. What Node changed as it started is put back first, from what the `tensorpool` shell
 * command read before Node ran (bin/tensorpool, TENSORPOOL_LAUNCH): signals the caller ignored or blocked, the
 * soft limit of open files, the descriptors it passed on (Node marks them close-on-exec) and its NODE_OPTIONS.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { native, type NativeExecState } from '../native.js';
import { CliError } from './common.js';

/** What the launcher's caller gave it, as the command is to get it. */
export interface CallerState {
  exec: NativeExecState;
  /**
   * The caller's NODE_OPTIONS where bin/tensorpool kept it from the CLI's own Node (`null`: the caller had
   * none); `undefined` where the CLI was started otherwise, and NODE_OPTIONS is what the caller gave.
   */
  nodeOptions?: string | null;
  /** Whether bin/tensorpool read the state; without it, Node's own changes are undone as far as they are known. */
  fromLauncher: boolean;
}

/** The signal numbers (1-64) set in a /proc status mask (hexadecimal, bit n-1 for signal n). */
function signalsOf(mask: string): number[] {
  const bits = BigInt(`0x${mask}`);
  const signals: number[] = [];
  for (let s = 1; s <= 64; s++) if ((bits >> BigInt(s - 1)) & 1n) signals.push(s);
  return signals;
}

const LAUNCH = /^(\d+):([0-9a-f]{16}):([0-9a-f]{16}):(\d+|unlimited):((?:\d{1,9},)*\d{0,9}):([01])$/;

/**
 * The caller's state from TENSORPOOL_LAUNCH when bin/tensorpool set it for this very process (its pid: a
 * value inherited from elsewhere is not this launch's). Else what can be known: descriptors 0-2 are passed
 * on; Node ignores SIGPIPE and SIGXFSZ and blocks SIGUSR1, which a caller rarely does; the open-files limit
 * and other descriptors stay as Node left them.
 */
export function callerState(env: NodeJS.ProcessEnv, pid = process.pid): CallerState {
  const launch = LAUNCH.exec(env.TENSORPOOL_LAUNCH ?? '');
  if (!launch || Number(launch[1]) !== pid) {
    return { exec: { ignored: [], blocked: [], inherited: [0, 1, 2] }, fromLauncher: false };
  }
  const [, , ignored, blocked, files, inherited, kept] = launch;
  return {
    exec: {
      ignored: signalsOf(ignored),
      blocked: signalsOf(blocked),
      openFiles: files === 'unlimited' ? -1 : Number(files),
      inherited: inherited === '' ? [] : inherited.split(',').map(Number),
    },
    nodeOptions: kept === '1' ? (env.TENSORPOOL_LAUNCH_NODE_OPTIONS ?? '') : null,
    fromLauncher: true,
  };
}

/** The caller's environment as it gave it: NODE_OPTIONS put back where bin/tensorpool kept it aside. */
export function callerEnvironment(env: NodeJS.ProcessEnv, state: CallerState): NodeJS.ProcessEnv {
  const out = { ...env };
  delete out.TENSORPOOL_LAUNCH;
  delete out.TENSORPOOL_LAUNCH_NODE_OPTIONS;
  if (state.nodeOptions === null) delete out.NODE_OPTIONS;
  else if (state.nodeOptions !== undefined) out.NODE_OPTIONS = state.nodeOptions;
  return out;
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

/**
 * Replaces this process with `command` (its first word found as a shell would), in environment `env`, with the
 * caller's state put back. Returns only by throwing: the CliError of a command that cannot be run.
 */
export function execCommand(command: string[], env: NodeJS.ProcessEnv, state: CallerState): never {
  const file = findCommand(command[0], env.PATH);
  const exec = state.exec;
  const pairs = Object.entries(env)
    .filter((entry): entry is [string, string] => entry[1] !== undefined)
    .map(([key, value]) => `${key}=${value}`);
  const errno = native.execProgram(file, command, pairs, exec);
  const name = Object.entries(os.constants.errno).find(([, value]) => value === errno)?.[0] ?? `errno ${errno}`;
  throw new CliError(`cannot run ${command[0]}: ${REASONS[name] ?? name}`, name === 'ENOENT' ? 127 : 126);
}

/**
 * What every subcommand shares: argument parsing with clear usage errors (in the CLI's words, with a "did you
 * mean" for a mistyped option or value), number parsing, the examples that end a command's --help, writing
 * --json, and the error type that ends the process with a message instead of a stack trace.
 */
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs, type ParseArgsConfig } from 'node:util';

import { writeFileAtomic } from '../io/files.js';
import { didYouMean } from './suggest.js';

/** A user-facing failure: printed as `tensorpool: message`, exit code `exitCode`, no stack trace. */
export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode = 2,
  ) {
    super(message);
  }
}

export interface Command {
  name: string;
  summary: string;
  usage: string;
  /** A number is the exit code to end with (`run` passes its command's on). */
  run(argv: string[]): Promise<void | number> | void | number;
}

type Options = NonNullable<ParseArgsConfig['options']>;

export interface ParsedCommand {
  /** String options by name (boolean flags read through `flags`). */
  values: Record<string, string | undefined>;
  flags: Record<string, boolean>;
  positionals: string[];
}

/** One example of a command's use, for the end of its --help: what it does, and the command line. */
export interface Example {
  what: string;
  command: string;
}

/** A command's --help: its usage, then "Examples:", each a comment saying what it does above its command line. */
export function withExamples(usage: string, examples: readonly Example[]): string {
  return `${usage}\n\nExamples:\n${examples.map((e) => `  # ${e.what}\n  ${e.command}`).join('\n')}`;
}

/** The command a usage text is of ("tensorpool train"), from its first line. */
function commandOf(usage: string): string {
  return /^usage: (tensorpool \S+)/.exec(usage)?.[1] ?? 'tensorpool';
}

/**
 * parseArgs' complaint in the CLI's words: an unknown option with the known one it is closest to, an option
 * missing its value, a flag given one; then where the options are listed.
 */
function parseError(error: unknown, options: Options, usage: string): CliError {
  const message = String((error as Error)?.message ?? error);
  const code = (error as NodeJS.ErrnoException)?.code;
  const named = /Option '(?:-\w, )?(-{1,2}[^' ]+)/.exec(message)?.[1];
  let what = message.split('\n')[0];
  if (code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') {
    const given = /^Unknown option '([^']+)'/.exec(message)?.[1] ?? '';
    const known = ['help', ...Object.keys(options)].map((name) => `--${name}`);
    what = `unknown option '${given}'${given.startsWith('--') ? didYouMean(given.split('=')[0], known) : ''}`;
  } else if (code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE' && named) {
    if (/argument missing/.test(message)) what = `${named} needs a value`;
    else if (/does not take an argument/.test(message)) what = `${named} takes no value`;
    else if (/ambiguous/.test(message)) what = `${named} needs a value; one that starts with '-' is written ${named}=-VALUE`;
  }
  return usageError(what, usage);
}

/** A usage error of one line: what is wrong, then where the command's options are listed. */
export function usageError(what: string, usage: string): CliError {
  return new CliError(`${what} ('${commandOf(usage)} --help' lists its options)`);
}

/**
 * parseArgs in strict mode, with its errors turned into usage errors of one line (parseError). The options
 * named in `outputs` are files the command will write: each is checked now (checkOutputFile), so a path that
 * cannot be written fails before any work, and before any other output is written.
 */
export function parseCommand(argv: string[], options: Options, usage: string, outputs: readonly string[] = []): ParsedCommand {
  let parsed;
  try {
    parsed = parseArgs({ args: argv, options: { help: { type: 'boolean', short: 'h' }, ...options }, allowPositionals: true, strict: true });
  } catch (error) {
    throw parseError(error, options, usage);
  }
  const values: Record<string, string | undefined> = {};
  const flags: Record<string, boolean> = {};
  for (const [key, value] of Object.entries(parsed.values)) {
    if (typeof value === 'boolean') flags[key] = value;
    else if (value === '') throw usageError(`--${key} needs a value, got an empty string`, usage);
    else values[key] = value as string | undefined;
  }
  for (const name of outputs) if (values[name] !== undefined) checkOutputFile(values[name]!, `--${name}`);
  checkOutputsApart(
    outputs.filter((name) => values[name] !== undefined).map((name) => ({ option: `--${name}`, file: values[name]! })),
    [...parsed.positionals, ...INPUT_OPTIONS.map((name) => values[name]).filter((file): file is string => file !== undefined)],
  );
  return { values, flags, positionals: parsed.positionals };
}

// The options of any command that name a file it reads.
const INPUT_OPTIONS = ['plan', 'offset-plan', 'trace'];

/**
 * Fails when two outputs name one file (one would overwrite the other), or an output names a file the command
 * reads (the input would be lost): the same file is the same inode, whatever the path or link to it.
 */
function checkOutputsApart(outputs: { option: string; file: string }[], inputs: string[]): void {
  const identity = (file: string): string => {
    try {
      const stat = fs.statSync(file);
      return `${stat.dev}:${stat.ino}`;
    } catch {
      return path.resolve(file); // not there yet
    }
  };
  const seen = new Map<string, string>();
  for (const { option, file } of outputs) {
    const id = identity(file);
    const other = seen.get(id);
    if (other) throw new CliError(`${option} ${file}: ${other} writes the same file`);
    seen.set(id, option);
  }
  for (const input of inputs) {
    const option = seen.get(identity(input));
    if (option) throw new CliError(`${option} ${input}: is an input of this command (writing it would destroy it)`);
  }
}

/** Fails unless a file can be written at `file`: its directory exists and is writable, and it is no directory. */
export function checkOutputFile(file: string, option: string): void {
  const dir = path.dirname(path.resolve(file));
  try {
    fs.accessSync(dir, fs.constants.W_OK);
  } catch {
    throw new CliError(`${option} ${file}: the directory ${dir} does not exist or is not writable`);
  }
  let stat: fs.Stats | undefined;
  try {
    stat = fs.statSync(file);
  } catch {
    return; // a new file
  }
  if (stat.isDirectory()) throw new CliError(`${option} ${file}: is a directory`);
  try {
    fs.accessSync(file, fs.constants.W_OK);
  } catch {
    throw new CliError(`${option} ${file}: is not writable`);
  }
}

/** A positive integer option (e.g. --reps), or the default when absent. */
export function integerOption(value: unknown, name: string, fallback: number, min = 1): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (typeof value !== 'string' || !/^\d+$/.test(value) || !Number.isSafeInteger(n) || n < min) {
    throw new CliError(`${name} must be an integer >= ${min}, got ${JSON.stringify(value)}`);
  }
  return n;
}

/** Sizes like 4096, 64K, 1M, 2G (powers of 1024). */
export function bytesOption(value: string, name: string): number {
  const match = /^(\d+)([KMG]i?B?)?$/i.exec(value.trim());
  if (!match) throw new CliError(`${name} must be a byte count such as 4096, 64K or 1M, got ${JSON.stringify(value)}`);
  const unit = match[2] ? { K: 1024, M: 1024 ** 2, G: 1024 ** 3 }[match[2][0].toUpperCase() as 'K' | 'M' | 'G'] : 1;
  const n = Number(match[1]) * unit;
  if (!Number.isSafeInteger(n) || n < 1) throw new CliError(`${name} must be at least 1 byte, got ${JSON.stringify(value)}`);
  return n;
}

export function oneOf<T extends string>(value: string | undefined, name: string, allowed: readonly T[], fallback: T): T {
  if (value === undefined) return fallback;
  if (!allowed.includes(value as T)) throw new CliError(`${name} must be one of ${allowed.join(', ')}, got ${JSON.stringify(value)}${didYouMean(value, allowed)}`);
  return value as T;
}

export function writeJsonFile(path: string | undefined, value: unknown): void {
  if (path) writeFileAtomic(path, JSON.stringify(value, null, 2) + '\n');
}

/** Exactly one positional argument (the trace or problem file). */
export function onePositional(positionals: string[], what: string, usage: string): string {
  if (positionals.length !== 1) {
    throw usageError(`expected one ${what}, got ${positionals.length === 0 ? 'none' : positionals.join(' ')}`, usage);
  }
  return positionals[0];
}

/**
 * Benchmarks measure the compiled package (dist/, what users run), so `npm run build` comes first.
 *
 * What every benchmark shares: its command-line flags (--reps N, --json FILE, --quick, --help), the
 * machine line, and writing results as JSON.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';

import { bytesOption, oneOf } from '../dist/cli/common.js';
import { describeMachine, machineInfo, type MachineInfo } from '../dist/report/machine.js';

export interface BenchArgs {
  reps: number;
  json: string | undefined;
  quick: boolean;
  positionals: string[];
  values: Record<string, string | boolean | undefined>;
}

/**
 * Parses the common flags plus any benchmark-specific string options in `extra`. With --help, prints the
 * benchmark's usage (the comment at the top of its file, and its options) and ends the process: nothing runs.
 */
export function benchArgs(defaultReps: number, extra: Record<string, { type: 'string' | 'boolean' }> = {}): BenchArgs {
  if (process.argv.includes('--help') || process.argv.includes('-h')) {
    console.log(benchUsage(process.argv[1], defaultReps, extra));
    process.exit(0);
  }
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      reps: { type: 'string' },
      json: { type: 'string' },
      quick: { type: 'boolean' },
      help: { type: 'boolean' },
      ...extra,
    },
  });
  const reps = values.reps === undefined ? defaultReps : Number(values.reps);
  if (!Number.isInteger(reps) || reps < 1) {
    console.error(`--reps must be a positive integer, got ${String(values.reps)}`);
    process.exit(2);
  }
  return {
    reps,
    json: values.json as string | undefined,
    quick: Boolean(values.quick),
    positionals,
    values: values as Record<string, string | boolean | undefined>,
  };
}

/** A benchmark's usage: the doc comment that opens its file, then every option it takes. */
export function benchUsage(file: string, defaultReps: number, extra: Record<string, { type: 'string' | 'boolean' }>): string {
  const source = fs.readFileSync(file, 'utf8');
  const header = /^\/\*\*\n([\s\S]*?)\n \*\//m.exec(source)?.[1] ?? '';
  const options = [
    `--reps N (default ${defaultReps})`,
    '--json FILE',
    '--quick',
    ...Object.entries(extra).map(([name, { type }]) => (type === 'string' ? `--${name} VALUE` : `--${name}`)),
    '--help',
  ];
  return [
    `usage: npx tsx ${path.relative(process.cwd(), file)} [options] (after npm run build)`,
    '',
    header.replace(/^ \* ?/gm, ''),
    '',
    `options: ${options.join(', ')}`,
  ].join('\n');
}

export function printHeader(title: string): MachineInfo {
  const machine = machineInfo();
  console.log(`# ${title}`);
  console.log(`# machine: ${describeMachine(machine)}`);
  return machine;
}

export function writeJson(path: string | undefined, value: unknown): void {
  if (!path) return;
  fs.writeFileSync(path, JSON.stringify(value, null, 2) + '\n');
  console.log(`# wrote ${path}`);
}

/** The shared traces (../shared/traces/NAME/trace.csv.gz), or `dir` instead; the bundled ones without either. */
export function benchTraces(dir: string | undefined): string[] {
  const sharedDir = dir ?? path.resolve(__dirname, '../../shared/traces');
  if (fs.existsSync(sharedDir)) {
    return fs
      .readdirSync(sharedDir)
      .sort()
      .map((name) => path.join(sharedDir, name, 'trace.csv.gz'))
      .filter((f) => fs.existsSync(f));
  }
  const bundled = path.resolve(__dirname, '../traces');
  return fs.readdirSync(bundled).filter((f) => f.endsWith('.csv.gz')).map((f) => path.join(bundled, f));
}

/** The whole program's instruction count in cachegrind's summary (its `I refs` line), or null where there is none. */
export function cachegrindInstructions(text: string): number | null {
  const refs = /I\s+refs:\s+([\d,]+)/.exec(text);
  return refs ? Number(refs[1].replace(/,/g, '')) : null;
}

/** A trace's short name for tables: its directory for shared traces, else its file name. */
export function traceLabel(file: string): string {
  return file.endsWith('trace.csv.gz') ? path.basename(path.dirname(file)) : path.basename(file).replace(/\.csv\.gz$/, '');
}

/**
 * A bench's checks of its own options: fail() prints `BENCH bench: message` and ends the process with code 2;
 * integer() reads option `name` as an integer of at least `min` (`fallback` when absent), or fails; list() reads
 * it as a comma-separated list of one or more items (undefined when absent), or fails saying it `takes` what it
 * takes; names() reads it as such a list of names from `known` (`fallback` when absent), or fails naming them;
 * integers() as a list of integers of at least `min`, sizes() as a list of byte counts (4096, 64K, 1M: the
 * CLI's grammar), each `fallback` when absent (sizes(): undefined where there is none), or fails; choice() as
 * one name from `known` (the CLI's oneOf), or fails.
 */
export interface OptionChecks {
  fail(message: string): never;
  integer(name: string, fallback: number, min?: number): number;
  list(name: string, takes: string): string[] | undefined;
  names<T extends string>(name: string, known: readonly T[], fallback?: readonly T[]): T[];
  integers(name: string, fallback: readonly number[], min?: number): number[];
  sizes(name: string, fallback?: readonly number[]): number[] | undefined;
  choice<T extends string>(name: string, known: readonly T[], fallback: T): T;
}

export function optionChecks(bench: string, args: BenchArgs): OptionChecks {
  const fail = (message: string): never => {
    console.error(`${bench} bench: ${message}`);
    process.exit(2);
  };
  const integer = (name: string, fallback: number, min = 1): number => {
    const value = args.values[name] === undefined ? fallback : Number(args.values[name]);
    if (!Number.isSafeInteger(value) || value < min) fail(`--${name} must be an integer >= ${min}, got ${String(args.values[name])}`);
    return value;
  };
  const list = (name: string, takes: string): string[] | undefined => {
    const value = args.values[name];
    if (value === undefined) return undefined;
    const items = String(value).split(',').map((s) => s.trim()).filter(Boolean);
    if (items.length === 0) fail(`--${name} takes ${takes}`);
    return items;
  };
  const names = <T extends string>(name: string, known: readonly T[], fallback: readonly T[] = known): T[] => {
    const items = list(name, `one or more of: ${known.join(', ')}`);
    if (items === undefined) return [...fallback];
    for (const item of items) if (!known.includes(item as T)) fail(`--${name}: unknown ${JSON.stringify(item)} (known: ${known.join(', ')})`);
    return items as T[];
  };
  const integers = (name: string, fallback: readonly number[], min = 1): number[] => {
    const takes = `a comma-separated list of integers >= ${min}`;
    const items = list(name, takes);
    if (items === undefined) return [...fallback];
    return items.map((item) => {
      const value = Number(item);
      return Number.isSafeInteger(value) && value >= min ? value : fail(`--${name} takes ${takes}, got ${JSON.stringify(item)}`);
    });
  };
  // One of the CLI's readers (lib/cli/common.ts), its refusal as the bench's.
  const read = <R>(reader: () => R): R => {
    try {
      return reader();
    } catch (error) {
      return fail((error as Error).message);
    }
  };
  const sizes = (name: string, fallback?: readonly number[]): number[] | undefined => {
    const items = list(name, 'a comma-separated list of byte counts such as 4096, 64K or 1M');
    if (items === undefined) return fallback && [...fallback];
    return items.map((item) => read(() => bytesOption(item, `--${name}`)));
  };
  const choice = <T extends string>(name: string, known: readonly T[], fallback: T): T => {
    const value = args.values[name];
    return read(() => oneOf(value === undefined ? undefined : String(value), `--${name}`, known, fallback));
  };
  return { fail, integer, list, names, integers, sizes, choice };
}

/**
 * Builds the bench helpers `targets` (bench/native, CMake) in build-native/ and returns their directory:
 * configured once, built every time (incremental), so that a helper from an older checkout is never run.
 */
export function buildBenchHelpers(targets: string[]): string {
  const root = path.resolve(__dirname, '..');
  const nativeDir = path.join(root, 'build-native');
  if (!fs.existsSync(path.join(nativeDir, 'CMakeCache.txt'))) {
    execFileSync('cmake', ['-S', root, '-B', nativeDir, '-DCMAKE_BUILD_TYPE=RelWithDebInfo'], { stdio: 'ignore' });
  }
  execFileSync('cmake', ['--build', nativeDir, '--target', ...targets], { stdio: 'ignore' });
  return nativeDir;
}

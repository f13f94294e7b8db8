/**
 * One run of a program as the kernel counts it, for the benches that run whole programs (programs.ts,
 * small-objects.ts): bench/native/rusage.cc (tp_rusage) runs it with its own settings in its environment and
 * reports wall time, CPU time, peak RSS and minor faults (wait4); its standard output is hashed (a result that
 * changed under an allocator shows there), the tail of its standard error kept.
 */
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

import { formatBytes } from '../dist/report/table.js';
import { buildBenchHelpers } from './harness.js';

export interface RunSample {
  wallNs: number;
  cpuUs: number;
  maxRssKiB: number;
  minorFaults: number;
  status: number;
  hash: string;
  stderr: string;
}

/** tp_rusage, built (incremental) with the other bench helpers `targets` in build-native/. */
export function rusageHelper(targets: string[] = []): string {
  return path.join(buildBenchHelpers(['tp_rusage', ...targets]), 'tp_rusage');
}

/**
 * One run of `command` through tp_rusage (`helper`) in `work` (its result file is written there), with
 * `settings` added to `base` in the program's environment only.
 */
export function measureRun(helper: string, work: string, command: string[], base: NodeJS.ProcessEnv, settings: Record<string, string>): Promise<RunSample> {
  const resultFile = path.join(work, 'rusage.txt');
  fs.rmSync(resultFile, { force: true });
  const assignments = Object.entries(settings).map(([k, v]) => `${k}=${v}`);
  return new Promise((resolve, reject) => {
    const child = spawn(helper, [resultFile, ...assignments, '--', ...command], { env: base, cwd: work, stdio: ['ignore', 'pipe', 'pipe'] });
    const hash = createHash('sha256');
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => hash.update(chunk));
    child.stderr.on('data', (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-4000)));
    child.on('error', reject);
    child.on('close', () => {
      const fields = fs.existsSync(resultFile) ? fs.readFileSync(resultFile, 'utf8').trim().split(' ').map(Number) : [];
      if (fields.length !== 6 || fields.some((f) => !Number.isFinite(f))) return reject(new Error(`tp_rusage reported nothing for ${command[0]}: ${stderr}`));
      const [wallNs, userUs, sysUs, maxRssKiB, status, minorFaults] = fields;
      resolve({ wallNs, cpuUs: userUs + sysUs, maxRssKiB, minorFaults, status, hash: hash.digest('hex'), stderr });
    });
  });
}

/** The program's path when it is on PATH (or absolute and there), else undefined. */
export function which(command: string): string | undefined {
  if (path.isAbsolute(command)) return fs.existsSync(command) ? command : undefined;
  const found = spawnSync('sh', ['-c', 'command -v "$1"', 'sh', command], { encoding: 'utf8' });
  return found.status === 0 ? found.stdout.trim() : undefined;
}

/** "never made", or what the pool served, from the library's TENSORPOOL_STATS lines. */
export function poolUse(stderr: string): string {
  const lines = stderr.split('\n').filter((l) => l.startsWith('tensorpool: process pool'));
  if (lines.length === 0) return 'no stats (stderr closed?)';
  if (lines.every((l) => l.includes('never made'))) return 'never made';
  const allocs = lines.map((l) => Number(/allocs (\d+)/.exec(l)?.[1] ?? 0)).reduce((a, b) => a + b, 0);
  const peak = Math.max(...lines.map((l) => Number(/peak (\d+) B/.exec(l)?.[1] ?? 0)));
  return `${allocs} allocs, peak ${formatBytes(peak)}`;
}

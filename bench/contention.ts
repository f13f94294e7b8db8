/**
 * Contention of the process allocator: bench/native/contention.cc (each thread keeps 8 blocks of 64 KiB to
 * 4 MiB live and replaces one per step) at 1, 2 and 4 threads, with glibc malloc, the preload library,
 * jemalloc, mimalloc and tcmalloc in front, one run each in rotating order per repetition; medians. The
 * figure is wall-clock ns per malloc+free pair of all threads together, so perfect scaling halves it from 1
 * to 2 threads on a 2-core machine.
 *
 *   npm run build && npx tsx bench/contention.ts [--reps 5] [--pairs 200000] [--json out.json]
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { preloadLibrary } from '../dist/index.js';
import { findLibrary } from '../dist/replay/allocators.js';
import { formatTable, round } from '../dist/report/table.js';
import { median } from '../dist/report/stats.js';
import { benchArgs, optionChecks, printHeader, writeJson } from './harness.js';

const args = benchArgs(5, { pairs: { type: 'string' } });
const pairs = String(optionChecks('contention', args).integer('pairs', 200000));
const machine = printHeader('contention: malloc + free from 1, 2 and 4 threads');
const root = path.resolve(__dirname, '..');
const program = path.join(root, 'build-native/tp_contention');
if (!fs.existsSync(program)) {
  execFileSync('cmake', ['-S', root, '-B', path.join(root, 'build-native'), '-DCMAKE_BUILD_TYPE=RelWithDebInfo'], { stdio: 'ignore' });
  execFileSync('cmake', ['--build', path.join(root, 'build-native'), '--target', 'tp_contention'], { stdio: 'ignore' });
}

const allocators: [string, string | undefined][] = [
  ['malloc', ''],
  ['tensorpool-preload', fs.existsSync(preloadLibrary) ? preloadLibrary : undefined],
  ['jemalloc', findLibrary('libjemalloc.so.2')],
  ['mimalloc', findLibrary('libmimalloc.so.2')],
  ['tcmalloc', findLibrary('libtcmalloc_minimal.so.4')],
];
const available = allocators.filter(([, library]) => library !== undefined);
const threadCounts = [1, 2, 4];
const samples = new Map<string, number[][]>(available.map(([name]) => [name, threadCounts.map(() => [])]));

for (let rep = 0; rep < args.reps; rep++) {
  for (let i = 0; i < available.length; i++) {
    const [name, library] = available[(i + rep) % available.length];
    const env = { ...process.env, LD_PRELOAD: library };
    const out = execFileSync(program, [pairs, ...threadCounts.map(String)], { env, encoding: 'utf8' });
    out.trim().split('\n').forEach((line, k) => samples.get(name)![k].push(Number(line.split(' ')[1])));
  }
  console.error(`# repetition ${rep + 1}/${args.reps}`);
}

const rows = available.map(([name]) => {
  const m = samples.get(name)!.map(median);
  return [name, ...m.map((v) => round(v, 1)), round(m[0] / m[1], 2)];
});
console.log(formatTable(['allocator', '1 thread ns/pair', '2 threads', '4 threads', 'speed-up 1 -> 2'], rows));
for (const [name, library] of allocators) if (library === undefined) console.log(`# ${name}: not installed (bench/install-peers.sh)`);
console.log(`# ${args.reps} repetitions, rotating order; medians; ${pairs} pairs per thread`);
writeJson(args.json, { benchmark: 'contention', machine, reps: args.reps, pairs: Number(pairs), threadCounts, samples: Object.fromEntries(samples) });

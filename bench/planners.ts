/**
 * Static planners: every strategy on MiniMalloc's challenging set (A-K), idealloc's real-model instances
 * and the shared trace problems: height, ratio to the lower bound and to the best known height, time.
 *
 *   npm run build && npx tsx bench/planners.ts [--time-limit 10000] [--open-limit 60000] [--strategies a,b]
 *                                              [--only NAME,...] [--json out.json]
 * D and J (optima open) get --open-limit for `best`; every other run gets --time-limit.
 */
import fs from 'node:fs';
import path from 'node:path';

import { STRATEGIES, planOffsets, readProblem, type Strategy } from '../dist/index.js';
import { formatTable, round } from '../dist/report/table.js';
import { benchArgs, optionChecks, printHeader, writeJson } from './harness.js';

const args = benchArgs(1, {
  'time-limit': { type: 'string' },
  'open-limit': { type: 'string' },
  strategies: { type: 'string' },
  only: { type: 'string' },
});
const checks = optionChecks('planners', args);
const timeLimitMs = checks.integer('time-limit', 10000);
const openLimitMs = checks.integer('open-limit', 60000);
const strategies: Strategy[] = checks.names('strategies', STRATEGIES);
const data = path.resolve(__dirname, '../../shared/bench-data');

interface Instance {
  suite: string;
  name: string;
  file: string;
  bestKnown: number | null;
  proven: boolean;
}
const instances: Instance[] = [];
const minimalloc = fs.readFileSync(path.join(data, 'minimalloc/KNOWN.csv'), 'utf8').trim().split('\n').slice(1).map((l) => l.split(','));
for (const f of minimalloc.filter((f) => f[0].length === 1)) {
  instances.push({ suite: 'challenging', name: f[0], file: path.join(data, `minimalloc/benchmarks/challenging/${f[0]}.1048576.csv`), bestKnown: Number(f[4]), proven: f[5].startsWith('yes') });
}
const idealloc = fs.readFileSync(path.join(data, 'idealloc/KNOWN.csv'), 'utf8').trim().split('\n').slice(1).map((l) => l.split(','));
for (const f of idealloc) {
  const optimum = /\(optimal\)/.test(f[7]) ? Number(f[7].split(' ')[0]) : null;
  instances.push({ suite: 'real model', name: f[0], file: path.join(data, `idealloc/benchmarks/${f[0]}.csv`), bestKnown: optimum, proven: optimum !== null });
}
for (const trace of ['resnet18_train', 'transformer_train']) {
  instances.push({ suite: 'trace', name: trace, file: path.resolve(data, `../traces/${trace}/problem.csv.gz`), bestKnown: null, proven: false });
}

const only = checks.names('only', instances.map((i) => i.name));
const machine = printHeader('planners: height / lower bound / best known, per strategy');
const rows = [];
const results = [];
for (const instance of instances.filter((i) => only.includes(i.name))) {
  const problem = readProblem(instance.file);
  for (const strategy of strategies) {
    const limit = strategy === 'best' && instance.suite === 'challenging' && !instance.proven ? openLimitMs : timeLimitMs;
    const layout = planOffsets(problem, { strategy, timeLimitMs: limit });
    if (!layout.valid) throw new Error(`${instance.name} ${strategy}: INVALID layout (${layout.notes})`);
    const vsKnown = instance.bestKnown ? layout.peak / instance.bestKnown : null;
    rows.push([
      instance.name,
      problem.size.length,
      strategy,
      layout.peak,
      round(layout.peak / layout.lowerBound, 4),
      vsKnown === null ? null : round(vsKnown, 4),
      round(layout.ms, 0),
      layout.optimal ? 'yes' : '',
    ]);
    results.push({ ...instance, buffers: problem.size.length, strategy, timeLimitMs: limit, peak: layout.peak, lowerBound: layout.lowerBound, ratio: layout.peak / layout.lowerBound, vsBestKnown: vsKnown, ms: layout.ms, optimal: layout.optimal, valid: layout.valid, notes: layout.notes });
    console.error(`# ${instance.name} ${strategy}: ${layout.peak} in ${Math.round(layout.ms)} ms`);
  }
}
console.log(formatTable(['instance', 'buffers', 'strategy', 'height', '/ lower bound', '/ best known', 'ms', 'optimal'], rows));
console.log(`# time limit ${timeLimitMs} ms (best on the open instances D, J: ${openLimitMs} ms); every layout verified`);
console.log('# best known: KNOWN.csv (MiniMalloc, 60-120 s probes); real models: the optimum where MiniMalloc proved one');
writeJson(args.json, { benchmark: 'planners', machine, timeLimitMs, openLimitMs, results });

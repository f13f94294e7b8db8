/**
 * Ordinary programs, and malloc-heavy ones, under glibc, the peers (Debian's jemalloc, mimalloc and
 * tcmalloc by LD_PRELOAD, when installed: bench/install-peers.sh) and the preload library as `tensorpool run`
 * starts a program (issue 34: the library sits in front of programs we did not write). Each run is measured
 * by bench/native/rusage.cc as the kernel counts it (wait4: wall time, user + system CPU time, peak RSS, minor faults), its
 * standard output hashed and compared with glibc's. Repetitions are interleaved (every configuration of a
 * program, in an order rotated each repetition, then the next program), and each configuration's run is
 * divided by glibc's run of the same repetition: the table has the median ratio and its 95% distribution-free
 * interval (with few repetitions the interval is the whole range, at the confidence printed under the table).
 * Before the timed runs each program runs once under the library with TENSORPOOL_STATS=1, untimed, which also
 * warms the page cache: the `pool` column says whether its process pool was ever made.
 * Targets (issue 34): peak RSS <= 1.10x glibc's at the default threshold; CPU <= 1.02x glibc's where the
 * pool is never made. --python-tests runs modules of CPython's regression tests instead (`python3 -m test
 * MODULE`, one process each; Debian's libpython3.11-testsuite), each a program named cpython:MODULE, and
 * prints the geometric mean of the library's peak RSS ratios over them (issue 54: <= 1.10x).
 *
 *   npm run build && npx tsx bench/programs.ts [--reps 5] [--programs LIST] [--configs LIST] [--scale X]
 *                                              [--min-bytes N] [--library FILE] [--python-tests LIST|default]
 *                                              [--quick] [--json out.json] [--help]
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { bytesOption } from '../dist/cli/common.js';
import { runEnvironment } from '../dist/cli/run.js';
import { preloadLibrary } from '../dist/index.js';
import { missingMessage, resolveAllocator } from '../dist/replay/allocators.js';
import { formatBytes, formatInterval, formatTable, round } from '../dist/report/table.js';
import { median, medianInterval, pairedRatios, type MedianInterval } from '../dist/report/stats.js';
import { benchArgs, optionChecks, printHeader, writeJson } from './harness.js';
import { measureRun, poolUse, rusageHelper, which, type RunSample } from './program-runs.js';

const CONFIGS = ['glibc', 'jemalloc', 'mimalloc', 'tcmalloc', 'tensorpool'] as const;
type ConfigName = (typeof CONFIGS)[number];

interface Program {
  name: string;
  what: string;
  /** The command, given the work directory (inputs and scripts are written there first) and the scale. */
  command: (work: string, scale: number) => string[];
  /** Writes the program's inputs into the work directory, once. */
  prepare?: (work: string, scale: number) => void;
}

const usage = (programNames: string[]) => `usage: npx tsx bench/programs.ts [options]

Runs ordinary programs (python3, sqlite3, gzip, xz, node) and malloc-heavy ones (bench/native/malloc-programs.cc)
under glibc, jemalloc, mimalloc, tcmalloc and tensorpool run (the preload library), interleaved, and prints per
program the wall time, CPU time, peak RSS and minor page faults of each as ratios to glibc's, with 95%
intervals, and whether its output is identical to glibc's. Take /tmp/tp-bench.lock (flock) on a shared machine.

  --reps N          repetitions of every program under every configuration (default 5)
  --programs LIST   programs to run, comma-separated (default: all): ${programNames.join(', ')}
  --configs LIST    configurations (default: all installed): ${CONFIGS.join(', ')} (glibc always runs)
  --scale X         multiplies every program's size (default 1: a ~100 MB JSON, ~200 MB of SQLite rows, a
                    100 MB file for gzip; about 25 s of CPU per configuration and repetition in all)
  --quick           --scale 0.2
  --min-bytes N     the library's threshold (default: the library's, 64K), set as TENSORPOOL_TEST_MIN_BYTES, the
                    tests' setting, so that thresholds below the floor (64K), which tensorpool run refuses, run too
  --library FILE    the preload library to run as tensorpool (default: this package's build), such as
                    another branch's build/Release/tensorpool-preload.so
  --python-tests LIST  CPython's regression test modules to run instead of the programs above, comma-separated;
                    'default' stands for ${PYTHON_TEST_MODULES.length} that run in a second or two (PYTHON_TEST_MODULES here); each is
                    \`python3 -m test MODULE\` (output discarded, the exit status checked), named cpython:MODULE; the
                    summary adds the geometric mean of the tensorpool rows' peak RSS ratios (needs Debian's
                    libpython3.11-testsuite); --programs may add others
  --json FILE       write every sample and ratio as JSON
  --help            print this and run nothing`;

const PYTHON_LISTS = `import hashlib, random, sys
n = int(sys.argv[1])
r = random.Random(1)
h = hashlib.sha256()
xs = [r.random() for _ in range(n)]
xs.sort()
h.update(repr(xs[::1000]).encode())
d = {f'key{i * 7919 % n}': [i, str(i), (i, i * 2)] for i in range(n)}
ks = sorted(d, key=lambda k: (d[k][1], k))
h.update(''.join(ks[::1000]).encode())
del d, ks, xs
bs = [r.randbytes(r.randrange(16, 4096)) for _ in range(n // 20)]
bs.sort()
h.update(b''.join(bs[::100]))
grown = bytearray()
for i in range(64):
    grown += bytes([i]) * (1 << 19)
h.update(hashlib.sha256(grown).digest())
print(n, h.hexdigest())
`;

const PYTHON_JSON = `import hashlib, json, sys
n = int(sys.argv[1])
data = [{'id': i, 'name': f'item-{i * 7919 % n}', 'values': [i, i * 2, i * 3.5], 'text': 'lorem ipsum ' * (i % 8), 'ok': i % 3 == 0} for i in range(n)]
text = json.dumps(data)
back = json.loads(text)
back.sort(key=lambda o: (o['name'], o['id']))
print(len(text), len(back), hashlib.sha256(json.dumps(back[::100]).encode()).hexdigest())
`;

// Strings and bytes built by repeated realloc growth: JSON texts of up to ~300 KB dumped and parsed back,
// appended to a bytearray and a str (both grown in place by realloc) to ~45 MB, and slices of them joined;
// the last two rounds' results kept.
const PYTHON_STRINGS = `import hashlib, json, random, sys
rounds = int(sys.argv[1])
target = 45 << 20
r = random.Random(1)
h = hashlib.sha256()
kept = []
for k in range(rounds):
    grown = bytearray()
    text = ''
    parts = []
    while len(grown) < target:
        size = r.randrange(1000, 300000)
        piece = json.dumps({'round': k, 'text': 'ab' * (size // 2), 'n': [r.random() for _ in range(8)]})
        back = json.loads(piece)
        grown += piece.encode()
        text += back['text'][:size // 8]
        parts.append(piece[:size // 4])
    joined = ''.join(parts)
    h.update(hashlib.sha256(grown).digest())
    h.update(hashlib.sha256(text.encode()).digest())
    h.update(hashlib.sha256(joined.encode()).digest())
    kept.append((grown, text))
    del kept[:-2], parts, joined
print(rounds, h.hexdigest())
`;

const NODE_APP = `const crypto = require('node:crypto');
const n = Number(process.argv[2]);
const items = [];
for (let i = 0; i < n; i++) items.push({ id: i, name: 'item-' + ((i * 7919) % n), tags: [i % 7, i % 13, 't' + (i % 101)], score: ((i * 2654435761) % 1000003) / 1000003 });
const text = JSON.stringify(items);
const back = JSON.parse(text);
back.sort((a, b) => a.score - b.score || a.id - b.id);
const buffers = [];
for (let i = 0; i < 64; i++) buffers.push(Buffer.alloc(1 << 20, i));
const typed = new Float64Array(n * 4).map((_, i) => Math.sin(i));
const hash = crypto.createHash('sha256').update(JSON.stringify(back.filter((_, i) => i % 997 === 0)));
hash.update(Buffer.concat(buffers)).update(Buffer.from(typed.buffer));
console.log(text.length, back.length, hash.digest('hex'));
`;

/** Rows of a CSV-like text, deterministic, about as compressible as a log (gzip: ~38%). */
function writeText(file: string, bytes: number): void {
  const words = ['tensor', 'pool', 'block', 'arena', 'malloc', 'free', 'page', 'fault', 'class', 'plan', 'stream', 'thread', 'batch', 'layer', 'weight', 'input', 'output', 'model', 'cache', 'queue'];
  let x = 88172645;
  const next = () => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x;
  };
  const fd = fs.openSync(file, 'w');
  try {
    let written = 0;
    let line = 0;
    while (written < bytes) {
      let chunk = '';
      for (let i = 0; i < 10000; i++) {
        const r = next();
        chunk += `${line++},${words[r % 20]}-${words[(r >>> 5) % 20]},${r % 100000},${(r >>> 8).toString(16)}\n`;
      }
      written += fs.writeSync(fd, chunk);
    }
  } finally {
    fs.closeSync(fd);
  }
}

const python = fs.existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';
// Modules of CPython's regression tests that run in a second or two each, in one process (peak RSS 15-50 MB).
const PYTHON_TEST_MODULES = ['test_base64', 'test_binascii', 'test_bisect', 'test_collections', 'test_csv', 'test_dict', 'test_difflib', 'test_enum',
  'test_fractions', 'test_functools', 'test_heapq', 'test_json', 'test_re', 'test_string', 'test_struct', 'test_textwrap'];

/** One program per module of CPython's regression tests: `python3 -m test MODULE`, its output discarded. */
function pythonTestPrograms(modules: string[]): Program[] {
  return modules.map((module) => ({
    name: `cpython:${module}`,
    what: `CPython's regression tests, ${module} (python3 -m test ${module}, one process)`,
    command: () => ['sh', '-c', 'exec "$0" -m test "$1" > /dev/null', python, module],
  }));
}
const root = path.resolve(__dirname, '..');
const nativeDir = path.join(root, 'build-native');
const count = (base: number, scale: number) => String(Math.max(1, Math.round(base * scale)));

const PROGRAMS: Program[] = [
  {
    name: 'python-lists',
    what: 'python3: 1M floats sorted, a dict of 1M lists sorted by key, 50k bytes objects sorted, a bytearray grown to 32 MiB',
    prepare: (work) => fs.writeFileSync(path.join(work, 'lists.py'), PYTHON_LISTS),
    command: (work, scale) => [python, path.join(work, 'lists.py'), count(1e6, scale)],
  },
  {
    name: 'python-json',
    what: 'python3: 700k records to a ~100 MB JSON text, parsed back and sorted',
    prepare: (work) => fs.writeFileSync(path.join(work, 'json_records.py'), PYTHON_JSON),
    command: (work, scale) => [python, path.join(work, 'json_records.py'), count(7e5, scale)],
  },
  {
    name: 'python-strings',
    what: 'python3: JSON texts of up to 300 KB dumped and parsed, appended to a bytearray and a str grown by realloc to ~45 MB (8 rounds, 2 kept)',
    prepare: (work) => fs.writeFileSync(path.join(work, 'strings.py'), PYTHON_STRINGS),
    command: (work, scale) => [python, path.join(work, 'strings.py'), count(8, scale)],
  },
  {
    name: 'sqlite3',
    what: 'sqlite3, in memory: 1.5M rows of ~135 bytes inserted (~200 MB), an index, aggregate and range queries',
    command: (_work, scale) => [
      'sqlite3',
      ':memory:',
      `CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER, v TEXT);
       WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < ${count(1.5e6, scale)})
       INSERT INTO t(k, v) SELECT (x * 2654435761) % 1000003, printf('%.*c%d', 100 + x % 60, 'v', x) FROM c;
       CREATE INDEX t_k ON t(k);
       SELECT count(*), sum(k), sum(length(v)) FROM t;
       SELECT k, count(*) FROM t GROUP BY k ORDER BY count(*) DESC, k LIMIT 3;
       SELECT sum(id) FROM t WHERE k BETWEEN 1000 AND 50000;`,
    ],
  },
  {
    name: 'gzip',
    what: 'gzip -6 of a 100 MB text file',
    prepare: (work, scale) => writeText(path.join(work, 'text-100M.csv'), Number(count(100e6, scale))),
    command: (work) => ['gzip', '-c', '-6', path.join(work, 'text-100M.csv')],
  },
  {
    name: 'xz',
    what: 'xz -6 -T1 of a 5 MB text file',
    prepare: (work, scale) => writeText(path.join(work, 'text-5M.csv'), Number(count(5e6, scale))),
    command: (work) => ['xz', '-c', '-6', '-T1', path.join(work, 'text-5M.csv')],
  },
  {
    name: 'node',
    what: 'node: 600k objects to JSON (~50 MB) and back, sorted; 64 Buffers of 1 MiB; a 19 MB Float64Array',
    prepare: (work) => fs.writeFileSync(path.join(work, 'app.js'), NODE_APP),
    command: (work, scale) => [process.execPath, path.join(work, 'app.js'), count(6e5, scale)],
  },
  {
    name: 'imagemagick',
    what: "ImageMagick's convert: a 3000x2000 image rotated by 33 degrees into a larger one (two blocks past the pool's largest class), sharpened; prints the pixels' signature",
    prepare: (work, scale) => {
      const side = (n: number) => Math.max(16, Math.round(n * Math.sqrt(scale)));
      const made = spawnSync('convert', ['-seed', '1', '-size', `${side(3000)}x${side(2000)}`, 'plasma:', path.join(work, 'plasma.png')], { stdio: 'inherit' });
      if (made.status !== 0) throw new Error('convert could not make the input image (apt-get install imagemagick)');
    },
    command: (work) => ['convert', path.join(work, 'plasma.png'), '-rotate', '33', '-sharpen', '0x1', '-format', '%#', 'info:'],
  },
  {
    name: 'trees',
    what: 'malloc-heavy, small only: binary trees of 32-byte nodes with 16-256 byte labels (depth 18)',
    command: (_work, scale) => [path.join(nativeDir, 'tp_malloc_programs'), 'trees', String(scale >= 1 ? 18 : 16), count(1, scale)],
  },
  {
    name: 'churn',
    what: 'malloc-heavy, 2 threads: 2,000 live blocks each, one replaced per step, 16 B-2 KiB and 10% 2 KiB-1 MiB',
    command: (_work, scale) => [path.join(nativeDir, 'tp_malloc_programs'), 'churn', '2', count(3e6, scale), '2000'],
  },
  {
    name: 'buffers',
    what: 'malloc-heavy, large: a document grown by realloc to 32 MiB and 16 buffers of 64 KiB-8 MiB, per round (8)',
    command: (_work, scale) => [path.join(nativeDir, 'tp_malloc_programs'), 'buffers', count(8, scale)],
  },
  {
    name: 'realloc',
    what: 'malloc-heavy, 4 threads: 200 live blocks each of 16 B-1 MiB (3% 1-16 MiB), a quarter realloc\'d to random sizes up and down, 1 in 16 handed to another thread to free',
    command: (_work, scale) => [path.join(nativeDir, 'tp_malloc_programs'), 'realloc', '4', count(2e5, scale), '200'],
  },
];

if (process.argv.includes('--help') || process.argv.includes('-h')) {
  console.log(usage(PROGRAMS.map((p) => p.name)));
  process.exit(0);
}
const args = benchArgs(5, { programs: { type: 'string' }, configs: { type: 'string' }, scale: { type: 'string' }, 'min-bytes': { type: 'string' }, library: { type: 'string' },
  'python-tests': { type: 'string' } });

const checks = optionChecks('programs', args);
// Annotated: a call narrows what follows only through a name declared with its type.
const fail: (message: string) => never = checks.fail;

function minBytesOption(value: string): string {
  try {
    return String(bytesOption(value, '--min-bytes'));
  } catch (error) {
    return fail((error as Error).message);
  }
}

const scale = args.values.scale !== undefined ? Number(args.values.scale) : args.quick ? 0.2 : 1;
if (!(scale > 0 && scale <= 10)) fail(`--scale must be a number in (0, 10], got ${String(args.values.scale)}`);
const minBytes = args.values['min-bytes'] === undefined ? undefined : minBytesOption(String(args.values['min-bytes']));
const library = args.values.library === undefined ? preloadLibrary : path.resolve(String(args.values.library));
const pythonTestModules = checks.list('python-tests', 'default or one or more module names of CPython\'s regression tests, comma-separated') ?? [];
for (const module of pythonTestModules) if (!/^[A-Za-z_][\w.]*$/.test(module)) fail(`--python-tests: ${JSON.stringify(module)} is not a module name`);
const pythonTests = pythonTestPrograms([...new Set(pythonTestModules.flatMap((module) => (module === 'default' ? PYTHON_TEST_MODULES : [module])))]);
if (pythonTests.length && spawnSync(python, ['-c', 'import test.support'], { stdio: 'ignore' }).status !== 0) {
  fail(`--python-tests: ${python} has no test package (apt-get install libpython3.11-testsuite)`);
}
const programs = [
  ...(pythonTests.length && args.values.programs === undefined ? [] : checks.names('programs', PROGRAMS.map((p) => p.name)).map((name) => PROGRAMS.find((p) => p.name === name)!)),
  ...pythonTests,
];
const wanted = checks.names('configs', CONFIGS);
if (!wanted.includes('glibc')) wanted.unshift('glibc');

/** What each configuration adds to the program's environment; a reason where it cannot run. */
function configSettings(name: ConfigName): Record<string, string> | string {
  if (name === 'glibc') return {};
  if (name === 'tensorpool') {
    if (!fs.existsSync(library)) return `the preload library is not built (${library}; npm run build:native)`;
    const env = runEnvironment({}, minBytes === undefined ? {} : { TENSORPOOL_TEST_MIN_BYTES: minBytes });
    return { ...Object.fromEntries(Object.entries(env).map(([k, v]) => [k, String(v)])), LD_PRELOAD: library };
  }
  const spec = resolveAllocator(name);
  return spec.library ? { LD_PRELOAD: spec.library } : missingMessage(spec);
}

async function main(): Promise<void> {
  const machine = printHeader('programs: ordinary and malloc-heavy programs under glibc, the peers and tensorpool run');
  const helper = rusageHelper(['tp_malloc_programs']);
  const configs: { name: ConfigName; settings: Record<string, string> }[] = [];
  for (const name of wanted) {
    const settings = configSettings(name);
    if (typeof settings === 'string') console.log(`# ${name}: skipped, ${settings}`);
    else configs.push({ name, settings });
  }
  const runnable = programs.filter((p) => {
    const command = p.command('', scale)[0];
    if (which(command)) return true;
    console.log(`# ${p.name}: skipped, ${command} is not installed${command === 'sqlite3' ? ' (bench/install-peers.sh installs it)' : ''}`);
    return false;
  });
  // Every configuration starts from the same environment: the caller's with no preload or pool settings.
  const base = runEnvironment(process.env);
  delete base.LD_PRELOAD;
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-programs-'));
  const samples = new Map<string, Map<ConfigName, RunSample[]>>(runnable.map((p) => [p.name, new Map(configs.map((c) => [c.name, []]))]));
  const pool = new Map<string, string>();
  try {
    for (const program of runnable) program.prepare?.(work, scale);
    const tensorpool = configs.find((c) => c.name === 'tensorpool');
    for (const program of runnable) {
      const probe = await measureRun(helper, work, program.command(work, scale), base, { ...(tensorpool?.settings ?? {}), TENSORPOOL_STATS: '1' });
      pool.set(program.name, tensorpool ? poolUse(probe.stderr) : '-');
    }
    for (let rep = 0; rep < args.reps; rep++) {
      for (const program of runnable) {
        for (let i = 0; i < configs.length; i++) {
          const config = configs[(i + rep) % configs.length];
          const sample = await measureRun(helper, work, program.command(work, scale), base, config.settings);
          if (sample.status !== 0) console.error(`# ${program.name} under ${config.name}: exit ${sample.status}: ${sample.stderr.trim().split('\n').slice(-3).join(' | ')}`);
          samples.get(program.name)!.get(config.name)!.push(sample);
        }
      }
      console.error(`# repetition ${rep + 1}/${args.reps} done`);
    }
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }

  const rows: (string | number | null)[][] = [];
  const results = [];
  let confidence = 1;
  for (const program of runnable) {
    const byConfig = samples.get(program.name)!;
    const glibc = byConfig.get('glibc')!;
    const ratio = (ours: RunSample[], pick: (s: RunSample) => number): MedianInterval => {
      const interval = medianInterval(pairedRatios(ours.map(pick), glibc.map(pick)));
      confidence = Math.min(confidence, interval.confidence);
      return interval;
    };
    const glibcHashes = new Set(glibc.map((s) => s.hash));
    for (const config of configs) {
      const runs = byConfig.get(config.name)!;
      const failed = runs.filter((s) => s.status !== 0).length;
      const identical = runs.every((s) => glibcHashes.size === 1 && glibcHashes.has(s.hash));
      const output = failed ? `${failed} failed` : glibcHashes.size !== 1 ? 'glibc differs' : identical ? 'identical' : 'DIFFERS';
      const wall = ratio(runs, (s) => s.wallNs);
      const cpu = ratio(runs, (s) => s.cpuUs);
      const rss = ratio(runs, (s) => s.maxRssKiB);
      const faults = ratio(runs, (s) => s.minorFaults);
      if (config.name === 'glibc') {
        rows.push([program.name, 'glibc', `${round(median(runs.map((s) => s.wallNs)) / 1e9, 2)} s`, `${round(median(runs.map((s) => s.cpuUs)) / 1e6, 2)} s`, formatBytes(median(runs.map((s) => s.maxRssKiB)) * 1024), String(median(runs.map((s) => s.minorFaults))), output, null]);
      } else {
        const extra = median(runs.map((s, i) => s.maxRssKiB - glibc[i].maxRssKiB)) * 1024;
        const rssCell = `${formatInterval(rss)} ${extra >= 0 ? '+' : '-'}${formatBytes(Math.abs(extra))}`;
        rows.push(['', config.name, formatInterval(wall), formatInterval(cpu), rssCell, formatInterval(faults), output, config.name === 'tensorpool' ? pool.get(program.name)! : null]);
      }
      results.push({ program: program.name, config: config.name, samples: runs.map(({ stderr: _stderr, ...s }) => s), wall, cpu, peakRss: rss, minorFaults: faults, output, pool: config.name === 'tensorpool' ? pool.get(program.name) : undefined });
    }
  }
  console.log(formatTable(['program', 'config', 'wall (x glibc)', 'CPU (x glibc)', 'peak RSS (x glibc)', 'minor faults (x glibc)', 'output', 'pool (tensorpool)'], rows));
  for (const program of runnable) console.log(`# ${program.name}: ${program.what}`);
  console.log(`# glibc rows: medians (wall, user + system CPU, peak RSS, minor faults); other rows: the median of each run's ratio to glibc's run of the same`);
  console.log(`# repetition and its distribution-free interval (peak RSS: then the median difference from glibc's)`);
  console.log(`# intervals at ${round(confidence * 100, 1)}% confidence with ${args.reps} repetitions (95% from 6 on)`);
  console.log(`# scale ${scale}; tensorpool: ${library} as tensorpool run starts the program${minBytes ? `, --min-bytes ${minBytes}` : ' (default threshold)'}`);
  const ours = results.filter((r) => r.config === 'tensorpool');
  if (ours.length) {
    const overRss = ours.filter((r) => r.peakRss.median > 1.1).map((r) => `${r.program} ${round(r.peakRss.median, 2)}x`);
    const never = ours.filter((r) => r.pool === 'never made');
    const overCpu = never.filter((r) => r.cpu.median > 1.02).map((r) => `${r.program} ${round(r.cpu.median, 3)}x`);
    console.log(`targets: peak RSS <= 1.10x glibc's: ${overRss.length ? `over in ${overRss.join(', ')}` : 'met'}; ` +
      `CPU <= 1.02x where the pool is never made (${never.map((r) => r.program).join(', ') || 'none'}): ${overCpu.length ? `over in ${overCpu.join(', ')}` : 'met'}`);
    const tests = ours.filter((r) => r.program.startsWith('cpython:'));
    if (tests.length) {
      const geomean = Math.exp(tests.reduce((sum, r) => sum + Math.log(r.peakRss.median), 0) / tests.length);
      console.log(`CPython's tests (${tests.length} modules): peak RSS geometric mean ${round(geomean, 3)}x glibc's (target <= 1.10x: ${geomean <= 1.1 ? 'met' : 'over'})`);
    }
  }
  writeJson(args.json, { benchmark: 'programs', machine, reps: args.reps, scale, minBytes: minBytes ?? null, library, programs: runnable.map((p) => ({ name: p.name, what: p.what, command: p.command('WORK', scale) })), results });
}

void main().catch((error: unknown) => {
  console.error(error instanceof Error ? error.message : error);
  process.exit(1);
});

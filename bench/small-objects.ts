/**
 * Below the threshold (issue 54): what the preload library costs programs whose allocations are small, against
 * glibc alone and against the allocator a user preloads instead (Debian's jemalloc, mimalloc and tcmalloc:
 * bench/install-peers.sh), each alone and with the library in front of it as `tensorpool run --with PEER`
 * starts a program (the library first in LD_PRELOAD, the peer after it: the peer serves what the pool does not).
 *
 * Instructions are counted by valgrind's cachegrind (`valgrind --tool=cachegrind --cache-sim=no`; Debian's
 * valgrind): a count the machine's load does not move, where times would. Peak RSS and minor faults are the
 * kernel's (wait4, bench/native/rusage.cc; the median of --reps runs outside valgrind). Each row's ratios are
 * to its base: the library alone and each peer alone to glibc, the library with --with PEER to that peer alone.
 *
 * Programs (--programs; all that can run by default):
 *   churn         bench/native/small-objects.c (built here with cc -O2): 1,000 blocks live, 1M times one freed
 *                 and replaced by a block of 8 B-1 KiB (log-uniform); the pool never made (every request small)
 *   churn-pool    the same with a 1 MiB block kept live, so that the pool is made: the path a program that
 *                 uses the pool takes for its small blocks
 *   churn-medium  the same as churn with blocks of 1-64 KiB (200k pairs): what thresholds in that range cost
 *   glibc-simple  glibc's benchtests/bench-malloc-simple.c (Debian's glibc source package, built here),
 *                 blocks of 16, 32 and 64 bytes: main arena, thread arena, main arena with threads
 *   mstress       mimalloc's test/test-stress.c (Debian's mimalloc source package), plain malloc, `2 50 25`
 *                 as mimalloc-bench runs it
 *   cfrac         mimalloc-bench's cfrac factoring a 31-digit number (only with --mimalloc-bench)
 *   espresso      mimalloc-bench's espresso on the first 600 lines of its largest.espresso (--mimalloc-bench)
 *   perl          Debian's perl (its allocations go to malloc): a hash of 50k arrays, strings and hashes,
 *                 sorted, half deleted
 *   sqlite3       100k rows of 10-70 byte strings inserted in memory, an index, a grouped concatenation
 *   python3       dicts, lists and strings of 50k records (PYTHONMALLOC=malloc: every object a malloc, as
 *                 CPython runs under a memory checker; pymalloc would hide the allocator below 512 bytes)
 *   phases        small-objects.c: one size at a time, 32 MiB live (8 B-1 KiB, 15 sizes), all freed before the
 *                 next: freed memory of one size serving the next (peak RSS; no instruction count)
 *   phases-medium the same with sizes of 1-32 KiB (11 sizes)
 *   trim          small-objects.c: 1.5M blocks of 16-64 bytes freed, then malloc_trim(0): what stays resident
 *   realloc-same  small-objects.c: realloc of 1-24 byte blocks to their own size: how many moved
 * The last four measure the small-object side itself: at the default threshold the library is not in their
 * way; with --min-bytes 1 (every request to the pool) they show what a small threshold costs.
 *
 * churn's instructions per malloc+free pair are (I(2N) - I(N)) / N: start-up and exit cancel out.
 * Sources of others (glibc's, mimalloc's: `apt-get source` through scripts/lib/debian-source.sh's cache;
 * mimalloc-bench's from --mimalloc-bench DIR, a checkout of github.com/daanx/mimalloc-bench) are built in a
 * temporary directory, never in the repository.
 *
 *   npm run build && npx tsx bench/small-objects.ts [--programs LIST] [--configs LIST] [--min-bytes LIST]
 *       [--mimalloc-bench DIR] [--reps 3] [--library FILE] [--quick] [--json out.json] [--help]
 *
 * --configs: glibc, tensorpool, jemalloc, tensorpool+jemalloc (tensorpool run --with jemalloc), mimalloc,
 * tensorpool+mimalloc, tcmalloc, tensorpool+tcmalloc (default: all whose peer is installed).
 * --min-bytes: the library's thresholds, a comma-separated list (each its own configurations, named
 * tensorpool@N; default: the library's own), set as TENSORPOOL_TEST_MIN_BYTES, the tests' setting, which also
 * takes thresholds below the pool's floor (64K) that TENSORPOOL_MIN_BYTES refuses.
 * --quick: churn 200k pairs (churn-medium 40k), mstress `2 25 5`, one run each for RSS.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { runEnvironment } from '../dist/cli/run.js';
import { preloadLibrary } from '../dist/index.js';
import { missingMessage, resolveAllocator } from '../dist/replay/allocators.js';
import { median } from '../dist/report/stats.js';
import { formatBytes, formatTable, round } from '../dist/report/table.js';
import { benchArgs, cachegrindInstructions, optionChecks, printHeader, writeJson } from './harness.js';
import { measureRun, poolUse, rusageHelper, which, type RunSample } from './program-runs.js';

const args = benchArgs(3, {
  programs: { type: 'string' },
  configs: { type: 'string' },
  'min-bytes': { type: 'string' },
  'mimalloc-bench': { type: 'string' },
  library: { type: 'string' },
});
const { fail, list, names, sizes } = optionChecks('small-objects', args);

const root = path.resolve(__dirname, '..');
const PEERS = ['jemalloc', 'mimalloc', 'tcmalloc'] as const;
type Peer = (typeof PEERS)[number];
const CONFIG_NAMES = ['glibc', 'tensorpool', ...PEERS.flatMap((p) => [p, `tensorpool+${p}`])];

interface Config {
  name: string;
  /** The configuration its ratios are to (none for glibc). */
  base?: string;
  settings: Record<string, string>;
}

interface Program {
  name: string;
  /** The invocations, run one after the other; their counts are added up. */
  commands: string[][];
  /** Counted by cachegrind (false: peak RSS and the program's own figures only). */
  instructions: boolean;
  /** The invocation with twice the work, for the instructions per pair: (I(double) - I(commands)) / pairs. */
  doubled?: { command: string[]; pairs: number };
  /** Whether its standard output is the same under every allocator (false: it prints timings). */
  deterministic: boolean;
  env?: Record<string, string>;
}

const library = args.values.library === undefined ? preloadLibrary : path.resolve(String(args.values.library));
const thresholds: (string | undefined)[] = sizes('min-bytes')?.map(String) ?? [undefined];
const wantedConfigs = names('configs', CONFIG_NAMES);
const mimallocBench = args.values['mimalloc-bench'] === undefined ? undefined : path.resolve(String(args.values['mimalloc-bench']));
if (mimallocBench && !fs.existsSync(path.join(mimallocBench, 'bench/cfrac/cfrac.c'))) fail(`--mimalloc-bench: no bench/cfrac/cfrac.c under ${mimallocBench} (a checkout of github.com/daanx/mimalloc-bench)`);
const churnPairs = args.quick ? 200_000 : 1_000_000;
const rssReps = args.quick ? 1 : args.reps;

/** The configurations that can run here (their settings: what each adds to `base`), and why the others cannot. */
function configurations(base: NodeJS.ProcessEnv): { configs: Config[]; skipped: string[] } {
  const configs: Config[] = [{ name: 'glibc', settings: {} }];
  const skipped: string[] = [];
  const peerLibrary = new Map<Peer, string>();
  for (const peer of PEERS) {
    const spec = resolveAllocator(peer);
    if (spec.library) peerLibrary.set(peer, spec.library);
    else if (wantedConfigs.some((c) => c === peer || c === `tensorpool+${peer}`)) skipped.push(missingMessage(spec));
  }
  if (!fs.existsSync(library)) skipped.push(`tensorpool: the preload library is not built (${library}; npm run build:native)`);
  // What `tensorpool run [--min-bytes N] [--with PEER]` adds (the hooks' variables, the threshold, the library
  // first in LD_PRELOAD and the peer after it), with --library's build in the library's place.
  const ours = (threshold: string | undefined, peer?: Peer): Record<string, string> => {
    const env = runEnvironment(base, threshold === undefined ? {} : { TENSORPOOL_TEST_MIN_BYTES: threshold }, true, true, peer && peerLibrary.get(peer));
    const added = Object.entries(env).filter(([k, v]) => v !== undefined && base[k] !== v).map(([k, v]) => [k, String(v)]);
    const preload = String(env.LD_PRELOAD).split(':');
    preload[0] = library;
    return { ...Object.fromEntries(added), LD_PRELOAD: preload.join(':') };
  };
  const named = (threshold: string | undefined) => (threshold === undefined ? 'tensorpool' : `tensorpool@${threshold}`);
  const wanted = (name: string) => wantedConfigs.includes(name);
  for (const threshold of thresholds) {
    if (wanted('tensorpool') && fs.existsSync(library)) configs.push({ name: named(threshold), base: 'glibc', settings: ours(threshold) });
  }
  for (const peer of PEERS) {
    const peerPath = peerLibrary.get(peer);
    if (!peerPath) continue;
    if (wanted(peer) || wanted(`tensorpool+${peer}`)) configs.push({ name: peer, base: 'glibc', settings: { LD_PRELOAD: peerPath } });
    if (!wanted(`tensorpool+${peer}`) || !fs.existsSync(library)) continue;
    for (const threshold of thresholds) configs.push({ name: `${named(threshold)}+${peer}`, base: peer, settings: ours(threshold, peer) });
  }
  return { configs, skipped };
}

/** Runs `script` (sh) with the repository's scripts/lib/debian-source.sh sourced; its stdout's lines. */
function debianSources(script: string): string[] {
  const lib = path.join(root, 'scripts/lib/debian-source.sh');
  const out = execFileSync('sh', ['-c', `set -eu; . "$0"; exec 9>"$cache/lock"; flock 9\n${script}`, lib], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  return out.trim().split('\n');
}

function compile(output: string, sources: string[], flags: string[], libraries: string[] = []): void {
  execFileSync('cc', ['-O2', '-w', ...flags, '-o', output, ...sources, ...libraries], { stdio: ['ignore', 'ignore', 'pipe'] });
}

/** Builds what the programs need in `work` and returns the programs that can run, and why the others cannot. */
function preparePrograms(work: string): { programs: Program[]; skipped: string[] } {
  const programs: Program[] = [];
  const skipped: string[] = [];
  const smallObjects = path.join(work, 'small-objects');
  compile(smallObjects, [path.join(root, 'bench/native/small-objects.c')], []);
  const churn = (name: string, pairs: number, sizes: string[], pool: string[] = []): Program => ({
    name,
    commands: [[smallObjects, 'churn', String(pairs), '1000', ...sizes, ...pool]],
    instructions: true,
    doubled: { command: [smallObjects, 'churn', String(2 * pairs), '1000', ...sizes, ...pool], pairs },
    deterministic: true,
  });
  programs.push(churn('churn', churnPairs, ['8', '1024']), churn('churn-pool', churnPairs, ['8', '1024'], ['pool']), churn('churn-medium', churnPairs / 5, ['1024', '65536']));

  try {
    const [glibc, mimalloc] = debianSources(`glibc=$(dpkg-query -W -f='\${source:Version}' libc6)
fetch glibc "$glibc" >&2
echo "$cache/src/glibc-$glibc"
echo "$cache/src/mimalloc-$(fetch_any mimalloc)"`);
    // glibc's benchtests outside glibc's build: its clock_gettime timing (the installed headers' names), and
    // the two internal headers that timing includes (one of them only for a macro the benchmark never uses).
    const shim = path.join(work, 'glibc-shim');
    fs.mkdirSync(path.join(shim, 'sysdeps/generic'), { recursive: true });
    fs.symlinkSync(path.join(glibc, 'sysdeps/generic/hp-timing.h'), path.join(shim, 'sysdeps/generic/hp-timing.h'));
    fs.symlinkSync(path.join(glibc, 'sysdeps/generic/hp-timing-common.h'), path.join(shim, 'hp-timing-common.h'));
    fs.writeFileSync(path.join(shim, '_itoa.h'), '');
    const glibcSimple = path.join(work, 'glibc-simple');
    compile(glibcSimple, [path.join(glibc, 'benchtests/bench-malloc-simple.c'), path.join(glibc, 'benchtests/json-lib.c')],
      ['-D_GNU_SOURCE', '-D_ISOMAC', '-DUSE_CLOCK_GETTIME', `-I${shim}`], ['-lpthread']);
    programs.push({ name: 'glibc-simple', commands: ['16', '32', '64'].map((size) => [glibcSimple, size]), instructions: true, deterministic: false });
    const stress = path.join(work, 'mstress');
    compile(stress, [path.join(mimalloc, 'test/test-stress.c')], ['-DUSE_STD_MALLOC', `-I${path.join(mimalloc, 'include')}`], ['-lpthread']);
    programs.push({ name: 'mstress', commands: [[stress, '2', args.quick ? '25' : '50', args.quick ? '5' : '25']], instructions: true, deterministic: true });
  } catch (error) {
    const message = (error as { stderr?: Buffer | string }).stderr?.toString().trim() || (error as Error).message;
    skipped.push(`glibc-simple, mstress: their Debian sources could not be fetched or built (${message.split('\n').slice(-2).join(' | ')})`);
  }

  if (mimallocBench) {
    const bench = path.join(mimallocBench, 'bench');
    const cfracSources = ['cfrac', 'pops', 'pconst', 'pio', 'pabs', 'pneg', 'pcmp', 'podd', 'phalf', 'padd', 'psub', 'pmul', 'pdivmod', 'psqrt', 'ppowmod',
      'atop', 'ptoa', 'itop', 'utop', 'ptou', 'errorp', 'pfloat', 'pidiv', 'pimod', 'picmp', 'primes', 'pcfrac', 'pgcd'];
    const cfrac = path.join(work, 'cfrac');
    compile(cfrac, cfracSources.map((s) => path.join(bench, 'cfrac', `${s}.c`)), ['-std=gnu89', '-DNOMEMOPT=1'], ['-lm']);
    programs.push({ name: 'cfrac', commands: [[cfrac, '4175764634412486014593803028771']], instructions: true, deterministic: true });
    const espresso = path.join(work, 'espresso');
    const espressoSources = fs.readdirSync(path.join(bench, 'espresso')).filter((f) => f.endsWith('.c')).map((f) => path.join(bench, 'espresso', f));
    compile(espresso, espressoSources, ['-std=gnu89'], ['-lm']);
    const input = path.join(work, 'espresso-600.pla');
    fs.writeFileSync(input, fs.readFileSync(path.join(bench, 'espresso/largest.espresso'), 'utf8').split('\n').slice(0, 600).join('\n') + '\n');
    programs.push({ name: 'espresso', commands: [[espresso, input]], instructions: true, deterministic: true });
  } else {
    skipped.push('cfrac, espresso: mimalloc-bench\'s programs, not in Debian: --mimalloc-bench DIR (a checkout of github.com/daanx/mimalloc-bench) builds them');
  }

  const real = (name: string, command: string[], env?: Record<string, string>) => {
    if (which(command[0])) programs.push({ name, commands: [command], instructions: true, deterministic: true, env });
    else skipped.push(`${name}: ${command[0]} is not installed${name === 'sqlite3' ? ' (bench/install-peers.sh installs it)' : ''}`);
  };
  real('perl', ['perl', '-e', 'my %h; my $s = 0; for my $i (1..50000) { $h{"key$i"} = [$i, "v" x ($i % 50), {a => $i}]; } ' +
    'for my $k (sort keys %h) { $s += length($h{$k}[1]); delete $h{$k} if $s % 3; } print scalar(keys %h), " $s\\n"'],
  { PERL_HASH_SEED: '0', PERL_PERTURB_KEYS: '0' });
  real('sqlite3', ['sqlite3', ':memory:', `CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER, v TEXT);
    WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100000)
    INSERT INTO t(k, v) SELECT (x * 2654435761) % 1000003, printf('%.*c%d', 10 + x % 60, 'v', x) FROM c;
    CREATE INDEX t_k ON t(k);
    SELECT count(*), sum(length(v)) FROM t;
    SELECT k % 1000, length(group_concat(v)) FROM t GROUP BY k % 1000 ORDER BY 2 DESC, 1 LIMIT 3;`]);
  const script = path.join(work, 'records.py');
  fs.writeFileSync(script, PYTHON_RECORDS);
  // Debian's python3, not a wrapper on PATH that execs another (valgrind would count the wrapper).
  real('python3', [fs.existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3', script, '50000'], { PYTHONMALLOC: 'malloc', PYTHONHASHSEED: '0' });

  programs.push(
    { name: 'phases', commands: [[smallObjects, 'phases', '32', '8', '1024']], instructions: false, deterministic: true },
    { name: 'phases-medium', commands: [[smallObjects, 'phases', '32', '1024', '32768']], instructions: false, deterministic: true },
    { name: 'trim', commands: [[smallObjects, 'trim', '1500000']], instructions: false, deterministic: true },
    { name: 'realloc-same', commands: [[smallObjects, 'realloc-same', '200000']], instructions: false, deterministic: true },
  );
  return { programs, skipped };
}

// Records as a small web service's data: dicts with strings and lists, a third removed as they come, an
// index of lists of strings, a sorted summary.
const PYTHON_RECORDS = `import sys
n = int(sys.argv[1])
rows = []
for i in range(n):
    rows.append({'id': i, 'name': 'item-%d' % (i * 7919 % n), 'tags': ['t%d' % (i % 13), 't%d' % (i % 7)], 'score': (i * 2654435761) % 1000003 / 1000003.0})
    if i % 3 == 0:
        j = i * 40503 % len(rows)
        rows[j] = rows[-1]
        rows.pop()
index = {}
for r in rows:
    index.setdefault(r['tags'][0], []).append(r['name'] + ':' + str(r['id']))
text = ','.join(sorted(k + '=' + str(len(v)) for k, v in index.items()))
print(len(rows), len(text), sum(len(v) for v in index.values()))
`;

/** Instructions cachegrind counts for `command` with `settings` in its environment (its output discarded). */
function countInstructions(work: string, command: string[], env: NodeJS.ProcessEnv): number {
  const log = path.join(work, 'cachegrind.log');
  const run = spawnSync('valgrind', ['--tool=cachegrind', '--cache-sim=no', '--cachegrind-out-file=/dev/null', `--log-file=${log}`, ...command],
    { env, cwd: work, stdio: ['ignore', 'ignore', 'pipe'], maxBuffer: 64 << 20 });
  const text = fs.existsSync(log) ? fs.readFileSync(log, 'utf8') : '';
  const instructions = cachegrindInstructions(text);
  // No count where the program exec'd another (valgrind follows no exec without --trace-children).
  if (run.status !== 0 || instructions === null) throw new Error(`valgrind ${command.join(' ')}: exit ${run.status ?? run.signal}, ${instructions !== null ? '' : 'no count; '}${text.trim().split('\n').slice(-2).join(' | ')}`);
  return instructions;
}

interface Result {
  program: string;
  config: string;
  base: string | null;
  instructions: number | null;
  perPair: number | null;
  maxRssKiB: number;
  minorFaults: number;
  output: string;
  figures: Record<string, number>;
  pool: string;
  samples: Omit<RunSample, 'stderr'>[];
}

/** The `small-objects: NAME VALUE` lines a program printed on stderr. */
function ownFigures(stderr: string): Record<string, number> {
  const figures: Record<string, number> = {};
  for (const m of stderr.matchAll(/^small-objects: ([a-z-]+) (\d+)$/gm)) figures[m[1]] = Number(m[2]);
  return figures;
}

async function main(): Promise<void> {
  const machine = printHeader('small-objects: small allocations under glibc, the peers and the preload library (alone and chained before each peer)');
  if (!which('cc')) fail('needs a C compiler (cc)');
  const valgrind = which('valgrind') !== undefined;
  if (!valgrind) console.log('# instructions: valgrind is not installed (Debian: apt-get install valgrind): peak RSS only');
  const helper = rusageHelper();
  // Every configuration starts from the same environment: the caller's with no preload or pool settings.
  const base: NodeJS.ProcessEnv = Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== 'LD_PRELOAD' && !k.startsWith('TENSORPOOL_')));
  const { configs, skipped: skippedConfigs } = configurations(base);
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-small-objects-'));
  const results: Result[] = [];
  try {
    const { programs: prepared, skipped } = preparePrograms(work);
    for (const line of [...skippedConfigs, ...skipped]) console.log(`# skipped: ${line}`);
    const wantedPrograms = list('programs', 'one or more program names, comma-separated');
    for (const name of wantedPrograms ?? []) if (!prepared.some((p) => p.name === name)) fail(`program '${name}' cannot run here or is unknown (see the skipped lines above; known: churn, churn-pool, churn-medium, glibc-simple, mstress, cfrac, espresso, perl, sqlite3, python3, phases, phases-medium, trim, realloc-same)`);
    const programs = wantedPrograms ? prepared.filter((p) => wantedPrograms.includes(p.name)) : prepared;
    for (const program of programs) {
      for (const config of configs) {
        const env = { ...base, ...program.env, ...config.settings };
        let instructions: number | null = null;
        let perPair: number | null = null;
        if (valgrind && program.instructions) {
          try {
            instructions = program.commands.reduce((sum, command) => sum + countInstructions(work, command, env), 0);
            if (program.doubled) perPair = (countInstructions(work, program.doubled.command, env) - instructions) / program.doubled.pairs;
          } catch (error) {
            console.error(`# ${program.name} under ${config.name}: no instruction count: ${(error as Error).message}`);
            instructions = perPair = null;
          }
        }
        const runs: RunSample[] = [];
        const stats: Record<string, string> = config.name.startsWith('tensorpool') ? { TENSORPOOL_STATS: '1' } : {};
        for (let rep = 0; rep < rssReps; rep++) {
          // Each invocation measured alone; a program of several is as large as its largest.
          const parts = [];
          for (const command of program.commands) parts.push(await measureRun(helper, work, command, base, { ...program.env, ...config.settings, ...(rep === 0 ? stats : {}) }));
          const failed = parts.find((s) => s.status !== 0);
          if (failed) console.error(`# ${program.name} under ${config.name}: exit ${failed.status}: ${failed.stderr.trim().split('\n').slice(-3).join(' | ')}`);
          runs.push({ ...parts[0], maxRssKiB: Math.max(...parts.map((s) => s.maxRssKiB)), minorFaults: parts.reduce((a, s) => a + s.minorFaults, 0),
            status: failed?.status ?? 0, hash: parts.map((s) => s.hash).join(','), stderr: parts.map((s) => s.stderr).join('\n') });
        }
        results.push({
          program: program.name, config: config.name, base: config.base ?? null, instructions, perPair,
          maxRssKiB: median(runs.map((s) => s.maxRssKiB)), minorFaults: median(runs.map((s) => s.minorFaults)),
          output: runs.some((s) => s.status !== 0) ? 'failed' : program.deterministic ? runs[0].hash : 'varies',
          figures: ownFigures(runs[0].stderr), pool: config.name.startsWith('tensorpool') ? poolUse(runs[0].stderr) : '-',
          samples: runs.map(({ stderr: _stderr, ...s }) => s),
        });
        console.error(`# ${program.name} under ${config.name}: done`);
      }
    }
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }

  const find = (program: string, config: string | null) => results.find((r) => r.program === program && r.config === config);
  const ratio = (ours: number | null, theirs: number | null | undefined) => (ours === null || !theirs ? null : round(ours / theirs, 3));
  const rows = results.map((r) => {
    const b = find(r.program, r.base);
    const glibcOutput = find(r.program, 'glibc')?.output;
    const output = r.output === 'failed' || r.output === 'varies' ? r.output : r.config === 'glibc' ? 'reference' : r.output === glibcOutput ? 'identical' : 'DIFFERS';
    const figures = Object.entries(r.figures).map(([k, v]) => `${k} ${v}`).join(', ');
    return [r.program, r.config, r.instructions, ratio(r.instructions, b?.instructions), formatBytes(r.maxRssKiB * 1024), ratio(r.maxRssKiB, b?.maxRssKiB),
      r.minorFaults, ratio(r.minorFaults, b?.minorFaults), output, figures || null, r.pool];
  });
  console.log(formatTable(['program', 'config', 'instructions', 'x base', 'peak RSS', 'x base', 'minor faults', 'x base', 'output', 'its own figures', 'pool (tensorpool)'], rows));
  const pairs = results.filter((r) => r.perPair !== null);
  if (pairs.length) {
    console.log('');
    console.log(formatTable(['program', 'config', 'instructions a malloc+free pair', 'over base'], pairs.map((r) => {
      const b = find(r.program, r.base);
      return [r.program, r.config, round(r.perPair!, 1), b?.perPair == null ? null : `${r.perPair! >= b.perPair ? '+' : ''}${round(r.perPair! - b.perPair, 1)}`];
    })));
  }
  console.log(`# base: glibc for the library alone and for each peer alone; the peer alone for tensorpool+PEER (tensorpool run --with PEER)`);
  console.log(`# instructions: valgrind --tool=cachegrind (every invocation of the program added up); peak RSS and minor faults: the median of ${rssReps} run(s) outside valgrind`);
  console.log(`# tensorpool: ${library} as tensorpool run starts a program${thresholds.some((t) => t !== undefined) ? `; thresholds ${thresholds.map((t) => t ?? 'default').join(', ')}` : ' (default threshold)'}`);
  writeJson(args.json, { benchmark: 'small-objects', machine, rssReps, churnPairs, library, thresholds: thresholds.map((t) => t ?? null), configs, results });
}

void main().catch((error: unknown) => {
  console.error(error instanceof Error ? error.message : error);
  process.exit(1);
});

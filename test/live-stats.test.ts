/**
 * The live view (`tensorpool stats`, lib/process/live-stats.ts) of programs running under the preload
 * library, read while they run; the one line for a process it cannot read; and the probes (USDT), traced by
 * perf. Programs: test/preload/live.c (built with the system's C compiler) and test/preload/live-node.js.
 */
import { describe, expect, it } from 'vitest';
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { preloadLibrary } from '../lib/index.js';
import { readLiveStats, LiveStatsError, type LiveStats } from '../lib/process/live-stats.js';

const MiB = 1 << 20;
const cli = path.resolve(__dirname, '../dist/cli/main.js');
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-live-'));
fs.chmodSync(tmp, 0o755); // another user's process runs the copies made here
const program = path.join(tmp, 'live');
const compiled = spawnSync('cc', ['-O1', '-o', program, path.resolve(__dirname, 'preload/live.c'), '-ldl'], { encoding: 'utf8' });
// What another user's process needs, readable by it: the library and the reader (the clone may sit in a
// directory only its owner may enter).
const library = path.join(tmp, 'tensorpool-preload.so');
fs.copyFileSync(preloadLibrary, library);
const reader = path.join(tmp, 'live-stats.js');
fs.copyFileSync(path.resolve(__dirname, '../dist/process/live-stats.js'), reader);
const root = process.getuid?.() === 0;

/** The C program's lines: one a process, its pid and what its pool must say. */
interface Expected {
  pid: number;
  allocs: number;
  releases: number;
  liveBlocks: number;
  bytesLive: number;
  peakBytesLive: number;
  freedBytes: number;
}

/** The next `count` JSON lines `child` prints. */
function linesOf(child: ChildProcess, count: number): Promise<Record<string, number>[]> {
  return new Promise((resolve, reject) => {
    let text = '';
    const lines: Record<string, number>[] = [];
    const onData = (chunk: Buffer) => {
      text += chunk.toString('utf8');
      let end;
      while ((end = text.indexOf('\n')) >= 0 && lines.length < count) {
        lines.push(JSON.parse(text.slice(0, end)));
        text = text.slice(end + 1);
      }
      if (lines.length === count) {
        child.stdout!.off('data', onData);
        resolve(lines);
      }
    };
    child.stdout!.on('data', onData);
    child.once('exit', (code) => reject(new Error(`the program ended (${code}) after ${lines.length} of ${count} lines: ${text}`)));
  });
}

/** `live hold [fork]` with the library preloaded (decay off: nothing changes while it sleeps), as `user` where given. */
function hold(args: string[], user?: number): ChildProcess {
  const env = { ...process.env, LD_PRELOAD: library, TENSORPOOL_DECAY_MS: 'off' };
  if (user === undefined) return spawn(program, ['hold', ...args], { env, stdio: ['ignore', 'pipe', 'inherit'] });
  return spawn('setpriv', [`--reuid=${user}`, `--regid=${user}`, '--clear-groups', '--inh-caps=-all', program, 'hold', ...args], {
    env,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
}

function stopped(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once('exit', () => resolve());
    child.kill('SIGKILL');
  });
}

/** What the page says against what the program said: its counters, whole. */
function expectAgrees(live: LiveStats, expected: Expected): void {
  const { pid, freedBytes, ...counters } = expected;
  void freedBytes;
  expect(live.pid).toBe(pid);
  expect(live.countersSettled).toBe(true);
  expect(live.counters).toMatchObject(counters);
  expect(live.counters).toMatchObject({ osFallbacks: 0, osOversize: 0, osLiveBlocks: 0, iterations: 0, generation: 1, switches: 0 });
}

/** `tensorpool stats ARGS`: exit code and output. */
function stats(...args: string[]) {
  const r = spawnSync(process.execPath, [cli, 'stats', ...args], { encoding: 'utf8', timeout: 60_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** One line on stderr, `tensorpool: pid N...`, exit code 1, nothing on stdout. */
function expectOneLine(r: ReturnType<typeof stats>, pid: number, message: RegExp): void {
  expect(r.code, r.stderr).toBe(1);
  expect(r.stdout).toBe('');
  expect(r.stderr.trimEnd().split('\n')).toHaveLength(1);
  expect(r.stderr).toMatch(new RegExp(`^tensorpool: pid ${pid}[ :]`));
  expect(r.stderr).toMatch(message);
}

describe('tensorpool stats: a running program read while it runs', () => {
  it('builds the C program', () => {
    expect(compiled.status, compiled.stderr).toBe(0);
  });

  it('a C program: its counters as it says, the arena, its RSS and faults, the table by size', async () => {
    const child = hold([]);
    try {
      const [expected] = (await linesOf(child, 1)) as unknown as Expected[];
      const live = await readLiveStats(expected.pid, { bySize: true, bySizeWaitMs: 60_000 });
      expectAgrees(live, expected);
      expect(live).toMatchObject({ mode: 'default', minBytes: 65536, decayMs: null, planPath: null, recordPath: null });
      expect(live.command).toBe(`${program} hold`);
      // The page is mapped, not open: none of the program's descriptors is the library's.
      const fds = fs.readdirSync(`/proc/${expected.pid}/fd`).map((fd) => fs.readlinkSync(`/proc/${expected.pid}/fd/${fd}`));
      expect(fds.filter((link) => link.startsWith('/memfd:'))).toEqual([]);
      expect(fs.readFileSync(`/proc/${expected.pid}/maps`, 'utf8')).toContain('/memfd:tensorpool-stats');
      // Published by the program before it slept (what changed), and again for the table.
      const g = live.gauges!;
      expect(g.arenas).toBe(1);
      expect(g.arenaBytes).toBeGreaterThanOrEqual(expected.peakBytesLive);
      expect(g.reservedBytes).toBeGreaterThanOrEqual(g.arenaBytes);
      expect(live.opsSinceGauges).toBe(0);
      // Decay is off: the freed block's span stays resident, idle.
      expect(g.idleBytes).toBeGreaterThanOrEqual(expected.freedBytes);
      // Every live block was written whole, and so was the freed one: the kernel holds their pages.
      expect(live.residentBytes).toBeGreaterThanOrEqual(expected.bytesLive + expected.freedBytes);
      expect(live.residentBytes).toBeLessThanOrEqual(g.arenaBytes + 4096);
      expect(live.rssBytes).toBeGreaterThan(live.residentBytes!);
      expect(live.peakRssBytes).toBeGreaterThanOrEqual(live.rssBytes);
      expect(live.minorFaults).toBeGreaterThan(0);
      // The table: every live block in its bucket, with the bytes it asked for; the freed one free.
      const rows = live.bySize!.rows;
      expect(rows.reduce((n, r) => n + r.liveBlocks, 0)).toBe(expected.liveBlocks);
      expect(rows.reduce((n, r) => n + r.liveBytes + r.osBytes, 0)).toBe(expected.bytesLive);
      for (const bytes of [1 * MiB, 3 * MiB, 300 << 10]) expect(rows.find((r) => r.from <= bytes && bytes < 2 * r.from)?.liveBlocks).toBeGreaterThanOrEqual(1);
      const freed = rows.find((r) => r.from <= expected.freedBytes && expected.freedBytes < 2 * r.from)!;
      expect(freed.freeBlocks).toBeGreaterThanOrEqual(1);
      expect(freed.idleBytes).toBeGreaterThanOrEqual(expected.freedBytes);
      expect(rows.reduce((n, r) => n + r.idleBytes, 0)).toBe(g.idleBytes);
    } finally {
      await stopped(child);
    }
  });

  it("a forked child counts in a page of its own; the parent's stays as it was", async () => {
    const child = hold(['fork']);
    let forkedPid = 0;
    try {
      const [parent, forked] = (await linesOf(child, 2)) as unknown as Expected[];
      forkedPid = forked.pid;
      expect(forked.pid).not.toBe(parent.pid);
      expectAgrees(await readLiveStats(parent.pid), parent);
      expectAgrees(await readLiveStats(forked.pid), forked);
    } finally {
      await stopped(child);
      if (forkedPid) spawnSync('kill', ['-KILL', String(forkedPid)]); // it would end within 20 ms of its parent anyway
    }
  });

  it('a Node program under tensorpool run: the page says what processPool().stats() says in it', async () => {
    const child = spawn(process.execPath, [cli, 'run', '--decay', 'off', '--', process.execPath, path.resolve(__dirname, 'preload/live-node.js')], {
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    try {
      let [before] = await linesOf(child, 1);
      // Read between two lines that agree (no JavaScript ran between them, and no thread of V8's allocated
      // through the pool): the page was read at a moment both describe. A line that differs (a background
      // allocation) starts the next try.
      let agreed = false;
      let live: LiveStats;
      let pick: (o: Record<string, number>) => Record<string, number>;
      for (let attempt = 0; attempt < 5 && !agreed; attempt++) {
        live = await readLiveStats(before.pid);
        child.stdin!.write('again\n');
        const [after] = await linesOf(child, 1);
        const keys = [...Object.keys(live.counters), ...Object.keys(live.gauges!)].filter((k) => k in before);
        pick = (o: Record<string, number>) => Object.fromEntries(keys.map((k) => [k, o[k]]));
        agreed = JSON.stringify(pick(after)) === JSON.stringify(pick(before));
        if (!agreed) before = after;
      }
      expect(agreed).toBe(true);
      expect(pick!({ ...live!.counters, ...live!.gauges })).toEqual(pick!(before));
      // The keys the two share: every counter of stats() the page names, and the arena's bytes.
      expect(Object.keys(pick!(before)).sort()).toEqual(expect.arrayContaining(['allocs', 'arenaBytes', 'bytesLive', 'iterations', 'liveBlocks', 'peakBytesLive', 'purgedBytes', 'releases', 'rewarmedBytes']));
      expect(before.iterations).toBeGreaterThanOrEqual(1);
      expect(live!.mode).toBe('default');
    } finally {
      child.stdin!.end();
      await stopped(child);
    }
  });

  it('the command: text named as --stats names it, --json with stats() keys, the list of processes, --watch until the process ends', async () => {
    const child = hold([]);
    let watch: ChildProcess | null = null;
    try {
      const [expected] = (await linesOf(child, 1)) as unknown as Expected[];
      const text = stats(String(expected.pid));
      expect(text.code, text.stderr).toBe(0);
      expect(text.stdout).toMatch(new RegExp(`^pid ${expected.pid} \\(.*live hold\\): tensorpool \\S+, default classes, requests >= 64\\.0 KiB, decay off`));
      expect(text.stdout).toMatch(/allocs 4, releases 1, hits 4, borrows 0, grown \d+, OS fallbacks 0, OS oversize 0/);
      expect(text.stdout).toMatch(/live +3 blocks \/ 4\.29 MiB \(peak 6\.29 MiB\)/);
      expect(text.stdout).toMatch(/arena +[\d.]+ MiB carved, 0 B committed, [\d.]+ GiB reserved; resident [\d.]+ MiB, idle [\d.]+ MiB/);
      const json = JSON.parse(stats(String(expected.pid), '--json').stdout);
      expect(json).toMatchObject({ pid: expected.pid, allocs: 4, releases: 1, liveBlocks: 3, bytesLive: expected.bytesLive, arenas: 1 });
      const sized = stats(String(expected.pid), '--by-size');
      expect(sized.stdout).toMatch(/by size \(worked out [\d.]+ s ago\)\n +capacity +live +live bytes/);
      const list = stats();
      expect(list.code).toBe(0);
      expect(list.stdout).toMatch(new RegExp(`^ *${expected.pid} +\\S*live hold +default +4 +3 / 4\\.29 MiB`, 'm'));
      // Watching: a line of JSON a sample, until the process ends (then one line, and exit code 0).
      const watcher = spawn(process.execPath, [cli, 'stats', String(expected.pid), '--watch', '0.2', '--json'], { stdio: ['ignore', 'pipe', 'pipe'] });
      watch = watcher;
      const samples = await linesOf(watcher, 2);
      expect(samples.map((s) => s.allocs)).toEqual([4, 4]);
      let err = '';
      watcher.stderr!.on('data', (chunk: Buffer) => (err += chunk.toString()));
      const code = new Promise((resolve) => watcher.once('exit', resolve));
      await stopped(child);
      expect(await code).toBe(0);
      expect(err).toBe(`tensorpool: pid ${expected.pid}: no such process\n`);
    } finally {
      await stopped(child);
      if (watch) await stopped(watch);
    }
  });
});

describe('tensorpool stats: one line for a process it cannot read', () => {
  it('a process that has ended', () => {
    const ended = spawnSync('true');
    expectOneLine(stats(String(ended.pid)), ended.pid!, /: no such process$/m);
  });

  it('a process not under tensorpool, and one under it whose pool is not made yet', async () => {
    const plain = spawn('sleep', ['30']);
    const under = spawn(process.execPath, [cli, 'run', '--', 'sleep', '30']);
    try {
      expectOneLine(stats(String(plain.pid)), plain.pid!, /\(sleep 30\): not under tensorpool \(its preload library is not loaded/);
      // `tensorpool run` execs its command: the pid is sleep's once the library is loaded.
      let r = stats(String(under.pid));
      for (let i = 0; i < 600 && /not under tensorpool|\(node /.test(r.stderr); i++) {
        await new Promise((resolve) => setTimeout(resolve, 50));
        r = stats(String(under.pid));
      }
      expectOneLine(r, under.pid!, /\(sleep 30\): under tensorpool's library, but its pool is not made yet/);
    } finally {
      await Promise.all([stopped(plain), stopped(under)]);
    }
  });

  it("another user's process: one line; its own user (not root) reads it through /proc/PID/mem", async (context) => {
    if (!root) {
      // Without root no process of another user can be started here; init (pid 1) is one where it is not ours.
      if (fs.statSync('/proc/1').uid === process.getuid?.()) return context.skip('not root, and pid 1 is this user’s: no other user’s process to read');
      expectOneLine(stats('1'), 1, /another user's process \(uid \d+\): only that user or root may read its pool/);
      return;
    }
    const child = hold([], 65534);
    try {
      const [expected] = (await linesOf(child, 1)) as unknown as Expected[];
      const as = (uid: number) =>
        spawnSync(
          'setpriv',
          [`--reuid=${uid}`, `--regid=${uid}`, '--clear-groups', '--inh-caps=-all', process.execPath, '-e',
            `require(${JSON.stringify(reader)}).readLiveStats(${expected.pid}).then((s) => console.log(JSON.stringify(s.counters)), (e) => { console.log(e.reason + ': ' + e.message); })`],
          // In tmp: Node 24 looks for a package.json above its working directory, and the clone's may be a
          // directory only its owner may enter (ERR_INVALID_PACKAGE_CONFIG).
          { encoding: 'utf8', cwd: tmp },
        );
      const other = as(65533);
      expect(other.stdout.trim(), `status ${other.status}, signal ${other.signal}, stderr: ${other.stderr}`).toBe(`other-user: pid ${expected.pid}: another user's process (uid 65534): only that user or root may read its pool`);
      const own = as(65534);
      expect(own.status, own.stderr).toBe(0);
      expect(JSON.parse(own.stdout)).toMatchObject({ allocs: expected.allocs, releases: expected.releases, liveBlocks: expected.liveBlocks, bytesLive: expected.bytesLive });
    } finally {
      await stopped(child);
    }
  });

  it('the reader refuses what is not a pid', () => {
    const r = stats('12ab');
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^tensorpool: PID must be a process id/);
    expect(stats('1', '2').stderr).toMatch(/expected at most one PID/);
    expect(stats('--watch', '0').stderr).toMatch(/--watch must be a number of seconds above 0/);
    expect(stats('--by-size').stderr).toMatch(/--by-size needs a PID/);
    expect(() => {
      throw new LiveStatsError(1, 'gone', 'x');
    }).toThrow(LiveStatsError);
  });
});

/** Why perf cannot attach to the probes here, or null: root, perf, tracefs (mounted here where it is not). */
function whyNoProbes(): string | null {
  if (!root) return 'uprobes need root (or a tracefs this user may write): not root';
  if (spawnSync('perf', ['--version']).status !== 0) return 'perf is not installed';
  const tracefs = '/sys/kernel/tracing';
  if (!fs.existsSync(path.join(tracefs, 'uprobe_events'))) {
    const mounted = spawnSync('mount', ['-t', 'tracefs', 'nodev', tracefs], { encoding: 'utf8' });
    if (mounted.status !== 0 || !fs.existsSync(path.join(tracefs, 'uprobe_events'))) {
      return `tracefs is not mounted at ${tracefs}, and mounting it failed: ${mounted.stderr.trim() || 'no uprobe_events'}`;
    }
  }
  if (fs.readFileSync(path.join(tracefs, 'uprobe_events'), 'utf8').includes('sdt_tensorpool/')) {
    return 'sdt_tensorpool events exist already (another session is tracing): left alone';
  }
  return null;
}

describe('probes (USDT) under perf', () => {
  it('perf probe finds every probe; perf record sees a short program fire them with the bytes it asked for', (context) => {
    const why = whyNoProbes();
    if (why) return context.skip(why);
    const home = fs.mkdtempSync(path.join(tmp, 'home-')); // perf's build-id cache, not the user's
    const perf = (...args: string[]) => spawnSync('perf', args, { encoding: 'utf8', env: { ...process.env, HOME: home } });
    const added = perf('probe', '-x', library, 'sdt_tensorpool:*');
    try {
      // Every site of a probe names arguments of the same types, or the kernel takes only the first sites.
      expect(added.status, added.stderr).toBe(0);
      const names = new Set([...added.stderr.matchAll(/sdt_tensorpool:(\w+)/g)].map((m) => m[1]));
      expect([...names].sort()).toEqual(['alloc', 'grow', 'mark', 'os_fallback', 'plan_switch', 'purge', 'release']);
      const data = path.join(tmp, 'perf.data');
      // Decay off: what malloc_trim gives back is all there (decay's epoch could end first on a loaded machine).
      const workload = ['env', `LD_PRELOAD=${library}`, 'TENSORPOOL_DECAY_MS=off', program, 'probes'];
      const recorded = spawnSync('perf', ['record', '-q', '-e', 'sdt_tensorpool:*', '-o', data, '--', ...workload], { encoding: 'utf8', env: { ...process.env, HOME: home } });
      expect(recorded.status, recorded.stderr).toBe(0);
      const line = JSON.parse(recorded.stdout) as Expected;
      const script = perf('script', '-i', data, '-F', 'pid,event,trace');
      expect(script.status, script.stderr).toBe(0);
      const events = script.stdout.split('\n').filter((l) => l.trim().split(/\s+/)[0] === String(line.pid));
      const of = (name: string) => events.filter((l) => l.includes(`sdt_tensorpool:${name}:`));
      // alloc: arg2 the bytes asked for (arg1 the block, arg3 the route, arg4 the class, arg5 the serial).
      const allocBytes = of('alloc').map((l) => Number(/arg2=(\d+)/.exec(l)![1]));
      expect(allocBytes.filter((b) => b === MiB)).toHaveLength(8);
      expect(allocBytes).toContain(96 * MiB);
      expect(of('release')).toHaveLength(line.releases);
      expect(of('os_fallback').map((l) => Number(/arg1=(\d+)/.exec(l)![1]))).toEqual([96 * MiB]); // larger than every class
      expect(of('grow').length).toBeGreaterThanOrEqual(1);
      expect(of('mark')).toHaveLength(1);
      // malloc_trim: the free spans' pages went back (purge reason 1: all idle memory at once), 8 MiB of them.
      const trims = of('purge').filter((l) => /arg1=1 /.test(l));
      expect(trims.reduce((n, l) => n + Number(/arg2=(\d+)/.exec(l)![1]), 0)).toBeGreaterThanOrEqual(8 * MiB);
    } finally {
      perf('probe', '-d', 'sdt_tensorpool:*');
    }
  });

  it('the probes are in the library as their notes say: a nop at each, arguments in registers or memory', () => {
    const notes = execFileSync('readelf', ['-n', library], { encoding: 'utf8' });
    const probes = [...notes.matchAll(/Provider: tensorpool\n\s+Name: (\w+)\n\s+Location: (0x[0-9a-f]+).*\n\s+Arguments: (.*)/g)];
    expect(new Set(probes.map((p) => p[1]))).toEqual(new Set(['alloc', 'grow', 'mark', 'os_fallback', 'plan_switch', 'purge', 'release']));
    for (const [, name, , args] of probes) {
      const count = { alloc: 5, release: 2, os_fallback: 2, grow: 3, purge: 2, plan_switch: 2, mark: 3 }[name];
      expect(args.trim().split(' '), name).toHaveLength(count!);
      for (const arg of args.trim().split(' ')) expect(arg, `${name}: ${args}`).toMatch(/^-?[1248]@(%\w+|-?\d*\(%\w+\))$/);
    }
  });
});

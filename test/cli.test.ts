import { describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { writeFileAtomic } from '../lib/io/files.js';
import { Plan, type TensorPoolError } from '../lib/index.js';
import { expectUsageError, fixture, run, runWith, traceFixture } from './helpers.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-cli-'));


describe('tensorpool train', () => {
  it('prints lower bound, arena, ratio, classes and time; writes the plan and --json', () => {
    const plan = path.join(tmp, 'resnet.plan.json');
    const json = path.join(tmp, 'train.json');
    const r = run('train', traceFixture('resnet18_train', 'trace.csv.gz'), '-o', plan, '--order', 'size-desc', '--json', json);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/lower bound\s+205 MiB \(215441388 B\)/);
    expect(r.stdout).toMatch(/arena\s+.*x the lower bound/);
    expect(r.stdout).toMatch(/class size\s+blocks/);
    expect(r.stdout).toMatch(/time\s+[\d.]+ ms/);
    const out = JSON.parse(fs.readFileSync(json, 'utf8'));
    for (const key of ['lowerBound', 'arenaBytes', 'ratio', 'interval', 'classes', 'trainMs']) expect(out).toHaveProperty(key);
    expect(out.lowerBound).toBe(215441388);
    expect(out.ratio).toBeCloseTo(out.arenaBytes / out.lowerBound, 10);
    // Size classes at 11 intervals (resnet18 asks for some tensors below 512 B), and one time-shared layout
    // (at the smallest)
    expect(out.candidates.filter((c: { order: string }) => !c.order.startsWith('time-shared'))).toHaveLength(11);
    expect(out.candidates.filter((c: { order: string }) => c.order === 'time-shared')).toMatchObject([{ interval: 64 }]);
    expect(out.notTimeShared).toBeNull(); // kept
    expect(Plan.read(plan).arenaBytes).toBe(out.arenaBytes);
  });

  it('takes a fixed interval, an order and an iteration', () => {
    const r = run('train', traceFixture('transformer_train', 'trace.json.gz'), '--interval', '64K', '--order', 'alloc-time', '--iteration', '2', '--share', 'off');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/trained on\s+iteration 2, order alloc-time, interval 65536/);
  });

  it('says why it kept no time-shared plan', () => {
    const flat = path.join(tmp, 'flat.csv'); // two tensors of one size live at once: a layout saves nothing
    fs.writeFileSync(flat, 'op,id,size,stream\na,1,4096,0\na,2,4096,0\nf,1,,0\nf,2,,0\n');
    const r = run('train', flat);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^time-shared {2}not kept: not 2% smaller than the size classes$/m);
    expect(run('train', flat, '--share', 'off').stdout).not.toMatch(/not kept/);
  });

  it('trains one time-shared plan from several traces and says how much memory its blocks share', () => {
    const shapes = ['320x320', '640x640', '736x1280'].map((s) => fixture('traces', 'ocr_det_infer', `ocr-${s}.csv.gz`));
    const plan = path.join(tmp, 'ocr.plan.json');
    const json = path.join(tmp, 'ocr.json');
    const r = run('train', ...shapes, '--share', 'auto', '-o', plan, '--json', json);
    expect(r.code).toBe(0);
    expect(r.stdout.match(/^trace /gm)).toHaveLength(3);
    expect(r.stdout).toMatch(/trained on\s+3 traces, one after another, time-shared blocks/);
    expect(r.stdout).toMatch(/layout\s+\d+ blocks at offsets of their own; \d+ pairs of blocks share memory \(size classes alone: .*x\)/);
    const out = JSON.parse(fs.readFileSync(json, 'utf8'));
    expect(out).toMatchObject({ traces: shapes, timeShared: true });
    expect(out.ratio).toBeLessThanOrEqual(1.15);
    expect(Plan.read(plan).layout).toBeDefined();
    expectUsageError(run('train', ...shapes, '--iteration', '1'), /--iteration applies to one trace/);
    expectUsageError(run('train', shapes[0], '--share', 'maybe'), /--share must be one of/);
  });

  it('rejects bad input with one clear line and exit code 2', () => {
    expectUsageError(run('train', path.join(tmp, 'missing.csv')), /missing\.csv: cannot read the trace: no such file/);
    expectUsageError(run('train'), /expected one or more trace files, got none/);
    expectUsageError(run('train', 'a', 'b'), /a: cannot read the trace: no such file/);
    expectUsageError(run('train', traceFixture('resnet18_train', 'trace.csv.gz'), '--interval', 'big'), /--interval must be auto or a byte count, a multiple of 64 from 64 to 1G/);
    expectUsageError(run('train', traceFixture('resnet18_train', 'trace.csv.gz'), '--order', 'random'), /--order must be one of/);
    expectUsageError(run('train', traceFixture('resnet18_train', 'trace.csv.gz'), '--iteration', '9'), /--iteration must be all or an iteration from 1 to 2 \(the trace has 2\), got "9"/);
    expectUsageError(run('train', traceFixture('resnet18_train', 'trace.csv.gz'), '--speed'), /^tensorpool: unknown option '--speed' \('tensorpool train --help' lists its options\)\n$/);
    const bad = path.join(tmp, 'bad.csv');
    fs.writeFileSync(bad, 'op,id,size,stream\na,1,-5,0\n');
    expectUsageError(run('train', bad), /bad\.csv:2: field "size": must be a positive integer/);
    expectUsageError(run('frobnicate'), /^tensorpool: unknown command 'frobnicate'; the commands are bench, replay, train, plan, info, run/);
    expectUsageError(run('train', traceFixture('resnet18_train', 'trace.csv.gz'), '-o', ''), /--output needs a value, got an empty string/);
    // An endless input is read up to the limit and refused, not until the process aborts.
    expectUsageError(run('info', '/dev/zero'), /\/dev\/zero: the input is more than 2 GiB, the most a trace may hold/);
  });
});

describe('mistakes: did you mean, ranges', () => {
  it('suggests the command or option meant, in one line of its own words', () => {
    expectUsageError(run('trian'), /^tensorpool: unknown command 'trian': did you mean train\? \('tensorpool --help' lists the commands\)\n$/);
    const plna = run('run', '--plna', 'x', '--', 'true');
    expectUsageError(plna, /^tensorpool: unknown option '--plna': did you mean --plan\? \('tensorpool run --help' lists its options\)\n$/);
    expect(plna.stderr).not.toMatch(/positional argument/); // parseArgs' own text
    expectUsageError(run('run', '--no-hook', '--', 'true'), /did you mean --no-hooks\?/);
    expectUsageError(run('--verison'), /^tensorpool: unknown option '--verison': did you mean --version\?/);
    expectUsageError(run('train', traceFixture('transformer_train', 'trace.csv.gz'), '--order', 'size_desc'), /--order must be one of alloc-time, size-desc, auto, got "size_desc": did you mean size-desc\?/);
    // Nothing close: no guess.
    expectUsageError(run('train', 'x.csv', '--zzzzzz'), /^tensorpool: unknown option '--zzzzzz' \(/);
    expectUsageError(run('run', '--plan', '--', 'true'), /^tensorpool: --plan needs a value/);
    expectUsageError(run('run', '--stats=1', '--', 'true'), /^tensorpool: --stats takes no value/);
  });

  it('refuses a size-class interval blocks cannot have, naming the range, before reading anything', () => {
    for (const interval of ['3', '100', '2G', '0']) {
      expectUsageError(run('train', path.join(tmp, 'not-read.csv'), '--interval', interval), new RegExp(`--interval must be auto or a byte count, a multiple of 64 from 64 to 1G .*got "${interval}"`));
    }
    const r = run('train', traceFixture('transformer_train', 'trace.csv.gz'), '--interval', '64', '--share', 'off');
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/trained on\s+the whole trace, order alloc-time, interval 64$/m);
  });
});

describe('a clone whose addon is not built', () => {
  it('answers --help, and every command that needs the addon with one line saying how to build it', () => {
    const unbuilt = { TENSORPOOL_ADDON: path.join(os.tmpdir(), 'tp-no-such-addon', 'tensorpool.node') };
    const help = runWith(unbuilt, '--help');
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/^usage: tensorpool <command>/);
    expectUsageError(runWith(unbuilt, 'train', traceFixture('resnet18_train', 'trace.csv.gz')), /the native addon could not be loaded .*npm run build:addon/);
    expectUsageError(runWith(unbuilt, 'run', '--', 'true'), /the native addon could not be loaded/);
  });
});

describe('tensorpool train: progress', () => {
  it('prints nothing on stderr when training is quick', () => {
    const r = run('train', traceFixture('transformer_train', 'trace.csv.gz'));
    expect(r.code).toBe(0);
    expect(r.stderr).toBe('');
  });

  // The heartbeat's worker writes while the main thread is blocked (as by a native training run). Its
  // compiled module, whose worker file lies beside it (npm test builds dist/ first).
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { startHeartbeat } = require(path.resolve(__dirname, '../dist/cli/heartbeat.js')) as typeof import('../lib/cli/heartbeat.js');
  function blockUntil(done: () => boolean): void {
    const deadline = Date.now() + 60_000;
    while (!done() && Date.now() < deadline); // busy, as a native call is: no event loop turn
  }
  function outputOf(options: { tty: boolean; afterMs: number }, blocked: (file: string) => () => boolean): string {
    const file = path.join(fs.mkdtempSync(path.join(tmp, 'heartbeat-')), 'stderr');
    const fd = fs.openSync(file, 'w');
    try {
      const heartbeat = startHeartbeat({ label: 'tensorpool train', fd, tickMs: 10, everyMs: 20, ...options });
      heartbeat.stage('reading big.csv');
      blockUntil(blocked(file));
      heartbeat.stage('training on 412003 tensors');
      blockUntil(() => fs.readFileSync(file, 'utf8').includes('training on'));
      heartbeat.stop();
    } finally {
      fs.closeSync(fd);
    }
    return fs.readFileSync(file, 'utf8');
  }

  it('on a log: a line now and then, naming the stage and the time so far, while the main thread is busy', () => {
    const log = outputOf({ tty: false, afterMs: 0 }, (file) => () => fs.readFileSync(file, 'utf8').split('\n').length > 2);
    const lines = log.trimEnd().split('\n');
    expect(lines.length).toBeGreaterThanOrEqual(3);
    for (const line of lines) expect(line).toMatch(/^tensorpool train: (reading big\.csv|training on 412003 tensors), \d+ s$/);
    expect(lines.at(-1)).toMatch(/training on 412003 tensors/);
  });

  it('on a terminal: one line redrawn in place, erased at the end', () => {
    const screen = outputOf({ tty: true, afterMs: 0 }, (file) => () => fs.readFileSync(file, 'utf8').includes('reading'));
    expect(screen).not.toContain('\n');
    expect(screen.startsWith('\rtensorpool train: reading big.csv, ')).toBe(true);
    expect(screen.endsWith('\r\x1b[K')).toBe(true);
  });

  it('writes nothing before its delay', () => {
    const file = path.join(fs.mkdtempSync(path.join(tmp, 'heartbeat-')), 'stderr');
    const fd = fs.openSync(file, 'w');
    const heartbeat = startHeartbeat({ label: 'tensorpool train', fd, tty: false, tickMs: 10, afterMs: 600_000 });
    const until = Date.now() + 200;
    blockUntil(() => Date.now() > until);
    heartbeat.stop();
    fs.closeSync(fd);
    expect(fs.readFileSync(file, 'utf8')).toBe('');
  });
});

describe('tensorpool info and help', () => {
  it('summarises a trace', () => {
    const r = run('info', traceFixture('resnet18_train', 'trace.json.gz'), '--json', path.join(tmp, 'info.json'));
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/events\s+2821 \(1442 allocs, 1378 frees, 2 iteration/);
    expect(JSON.parse(fs.readFileSync(path.join(tmp, 'info.json'), 'utf8')).lowerBound).toBe(215441388);
  });

  it('info --library prints the preload library, which LD_PRELOAD loads as tensorpool run does', () => {
    const r = run('info', '--library');
    expect(r.code).toBe(0);
    expect(r.stderr).toBe('');
    const library = r.stdout.trim();
    expect(r.stdout).toBe(`${library}\n`);
    expect(path.basename(library)).toBe('tensorpool-preload.so');
    const probe = `const { processPool } = require(${JSON.stringify(path.resolve(__dirname, '../dist/index.js'))});
      const pool = processPool(); pool.release(pool.alloc(1 << 20)); console.log(pool.stats().allocs);`;
    const preloaded = spawnSync(process.execPath, ['-e', probe], { encoding: 'utf8', env: { ...process.env, LD_PRELOAD: library }, timeout: 60_000 });
    expect(preloaded.stderr).toBe('');
    expect(Number(preloaded.stdout)).toBeGreaterThan(0);
    expectUsageError(run('info', '--library', 'trace.csv'), /--library takes no trace/);
  });

  it('lists its commands and each command explains itself', () => {
    const r = run('--help');
    expect(r.code).toBe(0);
    for (const command of ['info', 'train']) {
      expect(r.stdout).toContain(command);
      const help = run(command, '--help');
      expect(help.code).toBe(0);
      expect(help.stdout).toMatch(new RegExp(`^usage: tensorpool ${command}`));
    }
    const version = JSON.parse(fs.readFileSync(path.resolve(__dirname, '../package.json'), 'utf8')).version;
    for (const flag of ['--version', '-v']) {
      const r = run(flag);
      expect(r.code).toBe(0);
      expect(r.stdout).toBe(`${version}\n`);
    }
  });

  it("ends each command's help with examples that use only the options its usage lists", () => {
    const commands = [...run('--help').stdout.matchAll(/^ {2}(\w+) {2,}\S/gm)].map((m) => m[1]);
    expect(commands).toEqual(['bench', 'replay', 'train', 'plan', 'info', 'run', 'stats']);
    for (const command of commands) {
      const help = run(command, '--help').stdout;
      const [usage, examples] = help.split('\nExamples:\n');
      expect(examples, `${command} --help`).toBeDefined();
      const lines = examples.trimEnd().split('\n');
      expect(lines.length).toBeGreaterThanOrEqual(4);
      lines.forEach((line, i) => expect(line, `${command} --help`).toMatch(i % 2 === 0 ? /^ {2}# \S/ : /^ {2}tensorpool \w+( |$)/));
      for (const line of lines.filter((_, i) => i % 2 === 1)) {
        for (const invocation of line.trim().split(' && ')) {
          const [, name, ...args] = invocation.split(' ');
          const own = name === 'run' ? args.slice(0, args.indexOf('--')) : args;
          const usageOf = name === command ? usage : run(name, '--help').stdout;
          for (const option of own.filter((a) => a.startsWith('-'))) expect(usageOf, `${invocation}: ${option}`).toContain(option);
        }
      }
    }
  });
});

describe('output files', () => {
  const trace = traceFixture('transformer_train', 'trace.csv.gz');

  it('writes through a symbolic link and leaves the link', () => {
    const target = path.join(tmp, 'plan-target.json');
    const link = path.join(tmp, 'plan-link.json');
    fs.writeFileSync(target, 'old');
    fs.symlinkSync(target, link);
    expect(run('train', trace, '-o', link).code).toBe(0);
    expect(fs.lstatSync(link).isSymbolicLink()).toBe(true);
    expect(JSON.parse(fs.readFileSync(target, 'utf8')).format).toBe('tensorpool-plan');
  });

  it('never replaces a device node: a write to a full device fails and the node stays', () => {
    if (process.getuid?.() !== 0) return; // making a device node needs root (CI runs as root)
    const full = path.join(tmp, 'full');
    if (spawnSync('mknod', [full, 'c', '1', '7']).status !== 0) return; // no mknod here
    expectUsageError(run('train', trace, '-o', full), /ENOSPC|no space left/i);
    expect(fs.statSync(full).isCharacterDevice()).toBe(true);
  });

  it('follows a dangling symbolic link: its target is created, the link stays', () => {
    const target = path.join(tmp, 'dangling-target.json');
    const link = path.join(tmp, 'dangling-link.json');
    fs.symlinkSync(target, link);
    expect(run('train', trace, '-o', link).code).toBe(0);
    expect(fs.lstatSync(link).isSymbolicLink()).toBe(true);
    expect(JSON.parse(fs.readFileSync(target, 'utf8')).format).toBe('tensorpool-plan');
  });

  it("keeps the mode of the file it replaces", () => {
    const plan = path.join(tmp, 'moded.plan.json');
    fs.writeFileSync(plan, 'old');
    fs.chmodSync(plan, 0o604); // no mode a new file gets under any usual umask
    expect(run('train', trace, '-o', plan).code).toBe(0);
    expect(fs.statSync(plan).mode & 0o7777).toBe(0o604);
    expect(JSON.parse(fs.readFileSync(plan, 'utf8')).format).toBe('tensorpool-plan');
  });

  it('names the file in a failed write (no space left on /dev/full)', () => {
    const failure = (() => {
      try {
        writeFileAtomic('/dev/full', 'x'.repeat(1 << 16));
      } catch (error) {
        return error as TensorPoolError;
      }
    })();
    expect(failure).toMatchObject({ code: 'ERR_TP_WRITE', message: expect.stringMatching(/^\/dev\/full: cannot write: ENOSPC/) });
    expect(fs.statSync('/dev/full').isCharacterDevice()).toBe(true);
  });

  it('refuses two outputs at one path, and an output that is an input, before any work', () => {
    const same = path.join(tmp, 'same-output');
    expectUsageError(run('train', trace, '-o', same, '--json', same), /--json .*same-output: --output writes the same file/);
    expectUsageError(run('plan', fixture('minimalloc/A.1048576.csv'), '-o', same, '--svg', same), /--svg .*same-output: --output writes the same file/);
    expect(fs.existsSync(same)).toBe(false);
    const input = path.join(tmp, 'own-input.csv.gz');
    fs.copyFileSync(trace, input);
    const before = fs.readFileSync(input);
    expectUsageError(run('train', input, '-o', input), /--output .*own-input\.csv\.gz: is an input of this command/);
    const alias = path.join(tmp, 'own-input-link.csv.gz');
    fs.symlinkSync(input, alias);
    expectUsageError(run('train', alias, '--json', input), /--json .*: is an input of this command/);
    expect(fs.readFileSync(input).equals(before)).toBe(true);
  });

  it('refuses a directory with one line', () => {
    expectUsageError(run('train', trace, '-o', tmp), /--output .*: is a directory/);
  });

  it('checks every output path before any work, so no output is left half done', () => {
    const plan = path.join(tmp, 'not-written.plan.json');
    expectUsageError(run('train', trace, '-o', plan, '--json', '/nonexistent-tp-dir/x.json'), /--json \/nonexistent-tp-dir\/x\.json: the directory \/nonexistent-tp-dir does not exist or is not writable/);
    expect(fs.existsSync(plan)).toBe(false);
    expectUsageError(run('info', trace, '--json', tmp), /--json .*: is a directory/);
    expectUsageError(run('plan', fixture('minimalloc/A.1048576.csv'), '--svg', '/proc/tp-nowhere/x.svg'), /--svg .*does not exist or is not writable/);
  });
});

describe('tensorpool run from a path LD_PRELOAD cannot hold', () => {
  it('a package under a directory with a space and a colon still preloads the library and the Python hook', () => {
    // A copy of the built package (dist, the preload library, the hooks) under "a b:c"; node_modules linked.
    const root = path.join(fs.mkdtempSync(path.join(tmp, 'spaced ')), 'a b:c');
    fs.mkdirSync(path.join(root, 'build/Release'), { recursive: true });
    fs.cpSync(path.resolve('dist'), path.join(root, 'dist'), { recursive: true });
    fs.cpSync(path.resolve('hooks'), path.join(root, 'hooks'), { recursive: true });
    fs.copyFileSync(path.resolve('package.json'), path.join(root, 'package.json'));
    for (const file of ['tensorpool.node', 'tensorpool-preload.so']) fs.copyFileSync(path.resolve('build/Release', file), path.join(root, 'build/Release', file));
    fs.symlinkSync(path.resolve('node_modules'), path.join(root, 'node_modules'));
    const probe = `const fs = require('fs'); const { processPool } = require(${JSON.stringify(path.join(root, 'dist/index.js'))});
      const pool = processPool(); pool.release(pool.alloc(1 << 20));
      console.log(JSON.stringify({ mapped: fs.readFileSync('/proc/self/maps', 'utf8').includes(${JSON.stringify(path.join(root, 'build/Release/tensorpool-preload.so'))}), osFallbacks: pool.stats().osFallbacks, hits: pool.stats().hits, preload: process.env.LD_PRELOAD, pythonPath: process.env.PYTHONPATH }));`;
    const out = spawnSync(process.execPath, [path.join(root, 'dist/cli/main.js'), 'run', '--', process.execPath, '-e', probe], { encoding: 'utf8', timeout: 60_000 });
    expect(out.stderr).toBe('');
    expect(out.status).toBe(0);
    const seen = JSON.parse(out.stdout) as { mapped: boolean; osFallbacks: number; hits: number; preload: string; pythonPath: string };
    expect(seen.mapped).toBe(true);
    expect(seen.osFallbacks).toBe(0);
    expect(seen.hits).toBeGreaterThan(0);
    // Each list names a link without a separator, resolving to the package's own files.
    const [library] = seen.preload.split(':');
    expect(library).not.toMatch(/[\s:]/);
    expect(fs.realpathSync(library)).toBe(fs.realpathSync(path.join(root, 'build/Release/tensorpool-preload.so')));
    const [hooks] = seen.pythonPath.split(':');
    expect(fs.realpathSync(hooks)).toBe(fs.realpathSync(path.join(root, 'hooks/python')));
    expect(fs.statSync(path.dirname(library)).mode & 0o077).toBe(0);
  });

  it('refuses a link directory others can write to, with one line naming it', () => {
    const shared = fs.mkdtempSync(path.join(tmp, 'shared-'));
    const dir = path.join(shared, `tensorpool-${process.getuid?.() ?? 0}`);
    fs.mkdirSync(dir);
    fs.chmodSync(dir, 0o777);
    const spaced = path.join(shared, 'x y');
    fs.writeFileSync(spaced, '');
    const script = `const { listSafePath } = require(${JSON.stringify(path.resolve('dist/cli/list-safe-path.js'))});
      try { listSafePath(${JSON.stringify(spaced)}, ${JSON.stringify(shared)}); } catch (e) { console.log(e.message); }`;
    const out = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8' });
    expect(out.stdout).toMatch(/contains a space or a colon.*others can write to it \(mode 777\)/);
  });
});

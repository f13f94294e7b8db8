/**
 * The examples run as written (each in a process of its own, from the repository's root, as README says),
 * their output says what README says they show, README's quickstarts are the examples' code, and every
 * relative link in README.md and docs/ leads to a file.
 */
import { describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as ort from 'onnxruntime-node';

import { Plan } from '../lib/index.js';

const root = path.join(__dirname, '..');
const examples = path.join(root, 'examples');

function node(args: string[], timeout = 120_000): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, args, { cwd: root, encoding: 'utf8', timeout });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** The number printed after `label` in `text`. */
function figure(text: string, pattern: RegExp): number {
  const match = pattern.exec(text);
  if (!match) throw new Error(`no ${pattern} in:\n${text}`);
  return Number(match[1]);
}

/** y of the examples' model for an input of `dims` filled with 0.5, from onnxruntime-node alone. */
async function expectedScores(dims: number[]): Promise<string> {
  const session = await ort.InferenceSession.create(path.join(examples, 'model.onnx'));
  const x = new ort.Tensor('float32', new Float32Array(dims.reduce((a, b) => a * b)).fill(0.5), dims);
  const { y } = await session.run({ x });
  await session.release();
  return Array.from(y.data as Float32Array).slice(0, 3).map((v) => v.toFixed(4)).join(' ');
}

describe('examples', () => {
  it('model.onnx is what make-model.mjs builds', () => {
    const out = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'tp-examples-')), 'model.onnx');
    const r = node([path.join(examples, 'make-model.mjs'), out]);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(fs.readFileSync(out).equals(fs.readFileSync(path.join(examples, 'model.onnx')))).toBe(true);
    expect(node([path.join(examples, 'make-model.mjs'), '--help']).stdout).toMatch(/^usage: node examples\/make-model.mjs/);
  });

  it('pool.mjs: the pool takes no page fault per step where new Float32Array faults every page', () => {
    const r = node(['examples/pool.mjs']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const pooled = figure(r.stdout, /page faults in 10 steps: pool (\d+)/);
    const plain = figure(r.stdout, /new Float32Array (\d+)/);
    expect(pooled).toBeLessThan(1024); // less than one tensor's pages over all ten steps
    expect(plain).toBeGreaterThanOrEqual(10 * 1024); // at least one 4 MiB tensor faulted in per step
    expect(r.stdout).toMatch(/pool: \d+ allocations, \d+ served by their own class, 0 by the OS/);
  });

  it('onnxruntime-service.mjs: a PooledSession serves its cycle of shapes from the pool, outputs as without it', async () => {
    const r = node(['examples/onnxruntime-service.mjs']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`last scores: ${await expectedScores([2, 3, 128, 128])}`);
    // A 1x3x224x224 input alone is 147 pages: a run served from fresh memory faults more than this.
    expect(figure(r.stdout, /page faults per run: ([\d.]+)/)).toBeLessThan(64);
    expect(r.stdout).toMatch(/pool: \d+ allocations, 0 of them served by the OS/);
  });

  it('onnxruntime-plan.mjs: a plan trained in-process serves every allocation where scheduled', () => {
    const r = node(['examples/onnxruntime-plan.mjs']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(figure(r.stdout, /plan: \d+ bytes, ([\d.]+)x the lower bound/)).toBeGreaterThanOrEqual(1);
    const served = /served (\d+) allocations: (\d+) where scheduled, 0 from the OS/.exec(r.stdout);
    expect(served, r.stdout).not.toBeNull();
    expect(Number(served![1])).toBeGreaterThan(0);
    expect(served![2]).toBe(served![1]);
  });

  it('adaptive.mjs: the pool switches to a trained plan', () => {
    const r = node(['examples/adaptive.mjs']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^plan 2 serves after iteration \d+$/m);
    expect(r.stdout).toMatch(/^mode planned, arena [1-9]\d* bytes$/m);
  });

  it('streams.mjs: the stream computed y and the deferred release came back', () => {
    const r = node(['examples/streams.mjs']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toBe('y[0] = 2, releases still waiting for the stream: 0\n');
  });

  it("shared-pool.mjs: a worker's allocation is counted by the owner's pool", () => {
    const r = node(['examples/shared-pool.mjs']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toBe('the worker allocated 4194304 bytes; allocations counted by the pool: 1\n');
  });

  it('train-plan.mjs: the bundled trace replayed through its plan, every allocation where scheduled', () => {
    const r = node(['examples/train-plan.mjs']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^lower bound 215441388 bytes; plan \d+ \([\d.]+x\)$/m);
    expect(r.stdout).toMatch(/^1442 allocations: 1442 where the plan scheduled them, 0 from the OS$/m);
  });

  it('offsets.mjs: a verified layout, and an offsets-mode pool serving its iteration at planned offsets', () => {
    const r = node(['examples/offsets.mjs']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^best: height \d+, lower bound 1048576, valid true$/m);
    const served = /offsets mode: (\d+) of (\d+) allocations at their planned offset, 0 from the OS/.exec(r.stdout);
    expect(served, r.stdout).not.toBeNull();
    expect(served![1]).toBe(served![2]);
  });

  it('replay.mjs: tensorpool, malloc and ideal measured on the bundled trace', () => {
    const r = node(['examples/replay.mjs']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    for (const name of ['tensorpool', 'malloc', 'ideal']) {
      expect(r.stdout).toMatch(new RegExp(`^${name}: \\d+ ns/op, \\d+ faults/rep, RSS [\\d.]+x the lower bound$`, 'm'));
    }
    expect(figure(r.stdout, /^tensorpool: \d+ ns\/op, (\d+) faults\/rep/m)).toBe(0);
  });

  it('process/session.mjs: a PooledSession on the process pool under `tensorpool run --adaptive` switches to a plan', async () => {
    const r = spawnSync('npx', ['tensorpool', 'run', '--adaptive', '--', 'node', 'examples/process/session.mjs'], { cwd: root, encoding: 'utf8', timeout: 120_000 });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toContain(`last scores: ${await expectedScores([2, 3, 128, 128])}`);
    expect(r.stdout).toMatch(/^adaptive: planned$/m);
    // A 1x3x224x224 input alone is 147 pages: a run served from fresh memory faults more than this.
    expect(figure(r.stdout, /: ([\d.]+) page faults per run$/m)).toBeLessThan(64);
    // Without the launcher it says how to start it, and does nothing else.
    const alone = node(['examples/process/session.mjs']);
    expect(alone.code).toBe(2);
    expect(alone.stderr).toMatch(/^run me under `tensorpool run`/);
  });

  it('process/run.sh: an app that names no tensorpool run plain, then under tensorpool run: recorded, trained, run with the plan; the same outputs, every run marked by the hooks, the planned run with no OS fallback', async () => {
    const outputs = ['app.csv', 'app.plan.json'].map((f) => path.join(examples, 'process', f));
    for (const f of outputs) fs.rmSync(f, { force: true });
    try {
      const r = spawnSync('sh', ['examples/process/run.sh'], { cwd: root, encoding: 'utf8', timeout: 240_000 });
      expect(r.status, r.stderr).toBe(0);
      expect(fs.readFileSync(path.join(examples, 'process', 'app.mjs'), 'utf8')).not.toMatch(/tensorpool'|markIteration|enableCpuMemArena/); // what README's "no code change" says
      const runs = [...r.stdout.matchAll(/^([\d.]+) page faults per run$/gm)].map((m) => Number(m[1]));
      expect(runs).toHaveLength(4); // plain node, default classes, recording, planned
      const scores = [...r.stdout.matchAll(/^last scores: (.*)$/gm)].map((m) => m[1]);
      expect(scores).toEqual(Array(4).fill(await expectedScores([2, 3, 128, 128])));
      const plan = Plan.read(outputs[1]);
      expect(plan.arenaBytes).toBeGreaterThan(0);
      // A loop that repeats keeps its blocks: replayed, the default classes' spans carve more.
      expect(plan.serve).toBe('classes');
      // The pool lines of the runs with --stats (on stderr): the hooks marked each of the app's 21 runs, and
      // the planned run took nothing from the OS.
      expect(r.stderr).toMatch(/tensorpool: process pool \(pid \d+, default, [^)]*\): allocs [1-9]\d*, .*; iterations 21,/);
      expect(r.stderr).toMatch(/tensorpool: process pool \(pid \d+, planned, [^)]*\): allocs [1-9]\d*, .*OS fallbacks 0, OS oversize 0;.*; iterations 21,/);
      // Fewer faults with the plan than on the default classes, where the run went as recorded: measured 8.9-9.5
      // a run planned against 41.2-41.5 on Node 20. Not against plain node, which runs with ONNX Runtime's
      // arena (the app as it is): what it takes is not what this checks. Where V8's collector held more
      // inputs than in the recording (it can: with a young generation of 1 MiB, --max-semi-space-size=1, most
      // planned runs did, and took 154-208 faults a run against 49), their blocks' memory is busy when others
      // are scheduled on it; those requests miss the schedule and the pool grows for them once, inside the
      // measured runs. Served from the arena then (no OS fallback, above), but not planned.
      const misses = Number(/tensorpool: process pool \(pid \d+, planned, .*; schedule \d+ hits, (\d+) misses/.exec(r.stderr)?.[1]);
      expect(misses, r.stderr).toBeGreaterThanOrEqual(0);
      if (misses === 0) expect(runs[3], `${r.stdout}\n${r.stderr}`).toBeLessThan(runs[1]);
    } finally {
      for (const f of outputs) fs.rmSync(f, { force: true });
    }
  }, 300_000);
});

describe('README and docs', () => {
  const documents = ['README.md', 'examples/README.md', ...fs.readdirSync(path.join(root, 'docs')).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)];

  it("a block marked <!-- example: FILE --> is FILE's text, unchanged", () => {
    let marked = 0;
    for (const doc of documents) {
      const text = fs.readFileSync(path.join(root, doc), 'utf8');
      for (const m of text.matchAll(/<!-- example: (\S+) -->\n```\w*\n([\s\S]*?)```\n/g)) {
        marked++;
        expect(m[2], `${doc}: the block marked ${m[1]}`).toBe(fs.readFileSync(path.join(root, m[1]), 'utf8'));
      }
    }
    expect(marked).toBeGreaterThanOrEqual(3); // README's three quickstarts at least
  });

  it("docs/onnxruntime.svg is what scripts/picture.ts draws from docs/onnxruntime.json (the command docs/benchmarks.md gives)", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-picture-'));
    const picture = ['--import', 'tsx', 'scripts/picture.ts'];
    const configs = /scripts\/picture\.ts \S+ -o docs\/onnxruntime\.svg --configs (\S+)/.exec(fs.readFileSync(path.join(root, 'docs/benchmarks.md'), 'utf8'));
    expect(configs).not.toBeNull();
    const r = node([...picture, 'docs/onnxruntime.json', '-o', path.join(dir, 'out.svg'), '--configs', configs![1]]);
    expect(r.code, r.stderr).toBe(0);
    expect(fs.readFileSync(path.join(dir, 'out.svg'), 'utf8')).toBe(fs.readFileSync(path.join(root, 'docs/onnxruntime.svg'), 'utf8'));
    const help = node([...picture, '--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/^usage: npx tsx scripts\/picture.ts BENCH.json/);
    // Not a bench report: a clear error, exit 2, and the previous picture untouched.
    fs.writeFileSync(path.join(dir, 'bad.json'), '{"results": 3}');
    const bad = node([...picture, path.join(dir, 'bad.json'), '-o', path.join(dir, 'out.svg')]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/^picture: .*not the JSON of bench\/onnxruntime.ts/);
    expect(fs.readFileSync(path.join(dir, 'out.svg'), 'utf8')).toBe(fs.readFileSync(path.join(root, 'docs/onnxruntime.svg'), 'utf8'));
  });

  it('every relative link leads to a file or folder of the repository', () => {
    for (const doc of documents) {
      const text = fs.readFileSync(path.join(root, doc), 'utf8');
      for (const m of text.matchAll(/\]\(([^)\s]+)\)/g)) {
        const target = m[1].split('#')[0];
        if (/^[a-z]+:/.test(m[1]) || target === '') continue; // https:, mailto:, or a link within the page
        expect(fs.existsSync(path.join(root, path.dirname(doc), target)), `${doc}: link ${m[1]}`).toBe(true);
      }
    }
  });
});

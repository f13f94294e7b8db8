import { afterAll, describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { smallModel } from './onnx-model.js';

// `tensorpool run`'s hooks on unchanged programs: onnxruntime-node apps (test/hooks/app.cjs, app.mjs: they
// never import tensorpool) and Python programs. What the pool did is read from the --stats line the
// preload library prints at exit.

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-hooks-'));
const cli = path.resolve(__dirname, '../dist/cli/main.js');
const modelFile = path.join(tmp, 'small.onnx');
fs.writeFileSync(modelFile, smallModel());
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

interface Outcome {
  /** The program's last line of standard output, parsed, where it is a JSON object. */
  out: Record<string, unknown> | null;
  sums: number[] | null;
  buffers: number | null;
  allocs: number;
  iterations: number;
  stderr: string;
}

/** `tensorpool run --stats <runArgs> -- <command...>`: the program's JSON line and the pool's counters. */
function underRun(runArgs: string[], command: string[], env: NodeJS.ProcessEnv = {}): Outcome {
  const r = spawnSync(process.execPath, [cli, 'run', '--stats', ...runArgs, '--', ...command], {
    encoding: 'utf8',
    env: { ...process.env, ...env },
    timeout: 120_000,
  });
  expect(r.status, r.stderr).toBe(0);
  const line = r.stdout.trim().split('\n').pop() ?? '';
  const stats = /allocs (\d+),.*iterations (\d+)/.exec(r.stderr);
  expect(stats, r.stderr).not.toBeNull();
  const out = line.startsWith('{') ? JSON.parse(line) : null;
  return { out, sums: out?.sums ?? null, buffers: out?.buffers ?? null, allocs: Number(stats![1]), iterations: Number(stats![2]), stderr: r.stderr };
}

/** The app run for 8 and for 16 runs: the pool's allocations per extra run, the iterations of the longer one, its outputs. */
function perRun(runArgs: string[], app: (runs: number) => string[], env: NodeJS.ProcessEnv = {}) {
  const short = underRun(runArgs, [process.execPath, ...app(8)], env);
  const long = underRun(runArgs, [process.execPath, ...app(16)], env);
  return { allocsPerRun: (long.allocs - short.allocs) / 8, iterations: long.iterations, sums: long.sums! };
}
function app(how: string) {
  return (runs: number) => [path.resolve(__dirname, 'hooks/app.cjs'), modelFile, String(runs), how, '4'];
}

// A run of the model (batch 4) gets its 128 KiB input from JS and, with ONNX Runtime's arena off, two
// activations of 256 KiB from malloc: pool allocations per run are 1 with the arena, 3 without (V8 may
// add one of its own now and then: the bounds leave room for it).
describe("tensorpool run's Node hook: onnxruntime-node sessions of an unchanged app on the process pool", () => {
  let plainRuns: ReturnType<typeof perRun> | undefined;
  const plain = () => (plainRuns ??= perRun(['--no-hooks'], app('sequential')));
  /** The pool served each run's activations (the arena off), `iterations` were marked, and the outputs are the unhooked app's. */
  const expectHooked = (runs: ReturnType<typeof perRun>, iterations = 16) => {
    expect(runs.allocsPerRun).toBeGreaterThan(2.5);
    expect(runs.iterations).toBe(iterations);
    expect(runs.sums).toEqual(plain().sums);
  };

  it('--no-hooks (and TENSORPOOL_HOOKS=0) leave the session alone: its arena on, no iteration marked', () => {
    expect(plain().allocsPerRun).toBeLessThan(1.5);
    expect(plain().iterations).toBe(0);
    const off = perRun([], app('sequential'), { TENSORPOOL_HOOKS: '0' });
    expect(off.allocsPerRun).toBeLessThan(1.5);
    expect(off.iterations).toBe(0);
  });

  it("the arena and memory pattern are off, so the pool serves each run's activations; one iteration a run; the same outputs", () => {
    const hooked = perRun([], app('sequential'));
    expectHooked(hooked);
  });

  it('an ESM app (import * as ort) is hooked the same way', () => {
    const esm = perRun([], (runs) => [path.resolve(__dirname, 'hooks/app.mjs'), modelFile, String(runs), '4']);
    expectHooked(esm);
  });

  it('options the app set itself are kept: its arena stays on, and its runs are still marked', () => {
    const own = perRun([], app('arena'));
    expect(own.allocsPerRun).toBeLessThan(1.5);
    expect(own.iterations).toBe(16);
  });

  it('runs that overlap (four at a time) form one iteration together', () => {
    expectHooked(perRun([], app('concurrent')), 4);
  });

  it("a session in a worker thread: the arena off, its runs marked (natively, or by the main thread's processPool() in adaptive mode)", () => {
    const worker = perRun([], app('worker'));
    expectHooked(worker);
    expect(underRun(['--adaptive'], [process.execPath, ...app('worker')(16)]).iterations).toBe(16);
  });

  it("once a session's create() resolves, the pool's free memory (what loading the model used and freed) is given back: in the main thread and in a worker", () => {
    for (const where of ['main', 'worker']) {
      // Decay off: only the hook's trim gives memory back. test/hooks/created.cjs reads the pool's counters
      // as soon as its `await create()` resumes, then trims again.
      const r = spawnSync(process.execPath, [cli, 'run', '--decay', 'off', '--', process.execPath, path.resolve(__dirname, 'hooks/created.cjs'), modelFile, where], {
        encoding: 'utf8',
        timeout: 120_000,
      });
      expect(r.status, r.stderr).toBe(0);
      const seen = JSON.parse(r.stdout.trim().split('\n').pop() ?? '');
      // The model's 640 KiB matrix is parsed into memory the pool serves, copied into the session, and freed.
      expect(seen.purgedBytes, where).toBeGreaterThanOrEqual(512 * 1024);
      expect(seen.trimmedAgain, where).toBe(0); // nothing free was left resident
      expect(seen.refused).toBe('ERR_TP_INVALID_ARGUMENT');
    }
  });

  it('onnxruntime-node required by the path of its folder is hooked as by its name', () => {
    const byPath = perRun([], app('path'));
    expectHooked(byPath);
  });

  it("a session created by the user's own --require in NODE_OPTIONS is hooked: the hook is required first", () => {
    const early = `--require "${path.resolve(__dirname, 'hooks/early-session.cjs').replace(/["\\]/g, '\\$&')}"`;
    const hooked = perRun([], app('early'), { NODE_OPTIONS: early });
    expectHooked(hooked);
  });

  it("node under its permission model starts (with no Node hook, and one line saying so); a nested run adds the hook once", () => {
    const permission = process.allowedNodeEnvironmentFlags.has('--permission') ? '--permission' : '--experimental-permission';
    const script = 'console.log(JSON.stringify({ sums: [typeof process.permission] }))';
    const r = underRun([], [process.execPath, permission, `--allow-fs-read=${tmp}/*`, '-e', script]);
    expect(r.sums).toEqual(['object']);
    expect(r.stderr).toMatch(/no Node hook: node's permission model/);
    // The inner run execs the command in place of the outer one's: its settings (no --stats) are what count.
    const nested = spawnSync(process.execPath, [cli, 'run', '--', process.execPath, cli, 'run', '--', process.execPath, '-e', 'console.log(process.env.NODE_OPTIONS.split("hooks/node.js").length - 1)'], { encoding: 'utf8' });
    expect(nested.status, nested.stderr).toBe(0);
    expect(nested.stdout.trim()).toBe('1');
  });

  it("keeps the user's NODE_OPTIONS, and costs a program without onnxruntime-node nothing: no addon loaded", () => {
    const dir = path.join(tmp, 'a dir with "spaces"');
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(path.join(dir, 'preload.cjs'), 'globalThis.userPreload = true;\n');
    const quoted = `"${path.join(dir, 'preload.cjs').replace(/["\\]/g, '\\$&')}"`;
    const script = "const maps = require('fs').readFileSync('/proc/self/maps', 'utf8'); console.log(JSON.stringify({ sums: [globalThis.userPreload === true, /tensorpool\\.node/.test(maps), process.env.NODE_OPTIONS.includes('hooks/node.js')] }))";
    const r = underRun([], [process.execPath, '-e', script], { NODE_OPTIONS: `--require ${quoted}` });
    expect(r.sums).toEqual([true, false, true]);
    expect(r.stderr).not.toMatch(/warning|error/i);
  });

  // 40 runs of batch 64, each with a 2 MiB input made in JS and dropped at once. V8 on its own collects such
  // buffers only after tens of MiB (30-62 MiB here on Node 20-24); the hook, before a run, once they have grown
  // by --collect-after (default 4 MiB).
  it('frees the dead tensors of earlier runs before a run (--collect-after), and the outputs stay the same', () => {
    const runs = (runArgs: string[]) => underRun(runArgs, [process.execPath, path.resolve(__dirname, 'hooks/app.cjs'), modelFile, '40', 'sequential', '64']);
    const hooked = runs([]);
    const off = runs(['--collect-after', 'off']);
    expect(hooked.sums).toEqual(off.sums);
    expect(hooked.buffers).toBeLessThan(16 * 2 ** 20);
    expect(off.buffers).toBeGreaterThan(2 * hooked.buffers!);
    expect(hooked.stderr).not.toMatch(/warning/i);
  });

  // Real models, three sessions (bench/ocr-pipeline-app.mjs: PP-OCRv4 detection, the direction classifier and
  // recognition over pages and line crops of varying shapes), the app as its author wrote it.
  it('an OCR loop on three sessions: every run of each is an iteration, the pool serves all (no OS fallback), the outputs are the plain run\'s, and it peaks lower than three arenas', () => {
    const ocrApp = path.resolve(__dirname, '../bench/ocr-pipeline-app.mjs');
    const env = { APP_RUNS: '2', APP_WARMUP: '0' };
    const plainRun = spawnSync(process.execPath, [ocrApp], { encoding: 'utf8', env: { ...process.env, ...env }, timeout: 120_000 });
    expect(plainRun.status, plainRun.stderr).toBe(0);
    const arena = JSON.parse(plainRun.stdout.trim().split('\n').pop()!) as { sessionRuns: number; end: { hwm: number }; outputs: string };
    const r = underRun([], [process.execPath, ocrApp], env);
    const pooled = r.out as typeof arena;
    expect(pooled.outputs).toBe(arena.outputs);
    expect(pooled.sessionRuns).toBe(arena.sessionRuns);
    expect(r.stderr).toMatch(new RegExp(`OS fallbacks 0, OS oversize 0;.*iterations ${pooled.sessionRuns}\\b`));
    // Each arena holds its own session's largest run; the pool one set of spans for all three (0.5-0.7x).
    expect(pooled.end.hwm).toBeLessThan(arena.end.hwm);
  });
});

/** A python3 that imports torch (Debian's python3-torch goes with /usr/bin/python3), or null. */
function pythonWith(module: string): string | null {
  for (const python of ['python3', '/usr/bin/python3']) {
    if (spawnSync(python, ['-c', `import ${module}`], { stdio: 'ignore', timeout: 60_000 }).status === 0) return python;
  }
  return null;
}
const python = pythonWith('sys');
const torchPython = pythonWith('torch');
/** A Python 2 (python2 or python2.7 on PATH, where one runs), or null. */
const python2 = ['python2', 'python2.7'].find((p) => spawnSync(p, ['-c', 'import sys; assert sys.version_info[0] == 2'], { stdio: 'ignore', timeout: 60_000 }).status === 0) ?? null;

// A stand-in for torch's module layout (torch/optim/optimizer.py), for the hook's mechanism where torch is
// absent: with register_optimizer_step_post_hook (torch >= 2.0) or without it (older torch, step() per class).
function fakeTorch(dir: string, withRegister: boolean): void {
  fs.mkdirSync(path.join(dir, 'torch/optim'), { recursive: true });
  fs.writeFileSync(path.join(dir, 'torch/__init__.py'), 'from . import optim\n');
  fs.writeFileSync(path.join(dir, 'torch/optim/__init__.py'), 'from .optimizer import Optimizer\n');
  const hooks = withRegister
    ? ['_post = []', 'def register_optimizer_step_post_hook(hook):', '    _post.append(hook)', '']
    : ['_post = []', ''];
  const optimizer = [
    ...hooks,
    'class Optimizer:',
    '    def __init__(self, params, defaults):',
    '        self.steps = 0',
    '    def step(self):',
    '        raise NotImplementedError',
    '',
    'class SGD(Optimizer):',
    '    def __init__(self):',
    '        super().__init__([], {})',
    '    def step(self):',
    '        self.steps += 1',
    '        for hook in _post:',
    '            hook(self, (), {})',
  ];
  fs.writeFileSync(path.join(dir, 'torch/optim/optimizer.py'), optimizer.join('\n') + '\n');
}
const steps = (n: number) => `import json, torch.optim.optimizer as o; s = o.SGD()\nfor _ in range(${n}): s.step()\nprint(json.dumps({"sums": [s.steps]}))`;

describe.skipIf(python === null)("tensorpool run's Python hook: an iteration at each torch optimizer step()", () => {
  it('marks each step (torch >= 2.0 and older torch), chains to the sitecustomize it hides, and needs no torch', () => {
    for (const withRegister of [true, false]) {
      const dir = path.join(tmp, `torch-${withRegister}`);
      fakeTorch(dir, withRegister);
      fs.writeFileSync(path.join(dir, 'sitecustomize.py'), 'import builtins\nbuiltins.user_site_ran = True\n');
      const r = underRun([], [python!, '-c', `import builtins\n${steps(7)}\nassert builtins.user_site_ran`], { PYTHONPATH: dir });
      expect(r.sums).toEqual([7]);
      expect(r.iterations).toBe(7);
      expect(underRun(['--no-hooks'], [python!, '-c', steps(7)], { PYTHONPATH: dir }).iterations).toBe(0);
    }
    // No torch at all, and outside `tensorpool run`: nothing happens, nothing is said.
    const bare = spawnSync(python!, ['-c', 'import sys; print(sys.modules["sitecustomize"].__file__)'], {
      encoding: 'utf8',
      env: { ...process.env, PYTHONPATH: path.resolve(__dirname, '../hooks/python') },
    });
    expect(bare.status, bare.stderr).toBe(0);
    expect(bare.stderr).toBe('');
    const outside = fs.mkdtempSync(path.join(tmp, 'outside-'));
    fakeTorch(outside, true);
    const quiet = spawnSync(python!, ['-c', steps(3)], { encoding: 'utf8', env: { ...process.env, PYTHONPATH: [path.resolve(__dirname, '../hooks/python'), outside].join(':') } });
    expect(quiet.status, quiet.stderr).toBe(0);
    expect(quiet.stderr).toBe('');
  });

  // It runs at every start of every Python program under `tensorpool run`: importlib.abc alone imported
  // typing, tempfile, pathlib and lzma, 4 MB of a 9 MB interpreter's peak RSS.
  it('imports no module the program would not have imported: ctypes only once torch is', () => {
    const modules = 'import json, sys; print(json.dumps({"sums": sorted(sys.modules)}))';
    const plain = spawnSync(python!, ['-c', modules], { encoding: 'utf8' });
    expect(plain.status, plain.stderr).toBe(0);
    const before = new Set<string>(JSON.parse(plain.stdout).sums);
    const under = underRun([], [python!, '-c', modules]).out?.sums as string[];
    const added = under.filter((name) => !before.has(name) && name !== 'sitecustomize');
    expect(added).toEqual([]); // but the hook itself, where the Python had no sitecustomize of its own
  });

  it.skipIf(python2 === null)("Python 2 (no torch, no importlib.util): nothing said, and the user's sitecustomize still runs", () => {
    const dir = path.join(tmp, 'python2-site');
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(path.join(dir, 'sitecustomize.py'), 'import os\nos.environ["USER_SITE_RAN"] = "yes"\n');
    const r = underRun([], [python2!, '-c', 'import json, os; print(json.dumps({"sums": [os.environ.get("USER_SITE_RAN")]}))'], { PYTHONPATH: dir });
    expect(r.sums).toEqual(['yes']);
    expect(r.stderr).not.toMatch(/tensorpool: torch|Traceback|failed/);
  });

  it.skipIf(torchPython === null)('real torch: a training loop marks one iteration per optimizer step', () => {
    const script = [
      'import json, torch',
      'torch.manual_seed(0)',
      'model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))',
      'optimizer = torch.optim.Adam(model.parameters())',
      'for _ in range(6):',
      '    optimizer.zero_grad()',
      '    model(torch.randn(128, 256)).sum().backward()',
      '    optimizer.step()',
      'print(json.dumps({"sums": [6]}))',
    ].join('\n');
    expect(underRun([], [torchPython!, '-c', script]).iterations).toBe(6);
    expect(underRun(['--no-hooks'], [torchPython!, '-c', script]).iterations).toBe(0);
  });
});

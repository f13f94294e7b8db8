import { afterAll, describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { writeTextEncoder } from '../bench/transformers-model.js';

// `tensorpool run` on an unchanged @huggingface/transformers app (bench/transformers-app.mjs: a
// feature-extraction pipeline, which runs on onnxruntime-node). @huggingface/transformers is not a dependency
// of tensorpool: these tests run only where TENSORPOOL_TRANSFORMERS_DIR names a directory where it is
// installed (npm install --ignore-scripts --prefix DIR @huggingface/transformers@4), and are skipped otherwise.

const installed = process.env.TENSORPOOL_TRANSFORMERS_DIR;
const cli = path.resolve(__dirname, '../dist/cli/main.js');
const RUNS = 12;

describe.skipIf(!installed)('transformers.js pipelines under tensorpool run (needs TENSORPOOL_TRANSFORMERS_DIR: an install of @huggingface/transformers)', () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-transformers-'));
  afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));
  writeTextEncoder(tmp, 'text-encoder');

  /** The app under `tensorpool run --stats <runArgs>`: its outputs' hash and the iterations the pool counted. */
  function underRun(runArgs: string[]) {
    const env = { ...process.env, TRANSFORMERS_DIR: installed, TRANSFORMERS_MODELS: tmp, TRANSFORMERS_MODEL: 'text-encoder', APP_RUNS: String(RUNS) };
    const r = spawnSync(process.execPath, [cli, 'run', '--stats', ...runArgs, '--', process.execPath, path.resolve(__dirname, '../bench/transformers-app.mjs')], { encoding: 'utf8', env, timeout: 120_000 });
    expect(r.status, r.stderr).toBe(0);
    const stats = /iterations (\d+)/.exec(r.stderr);
    expect(stats, r.stderr).not.toBeNull();
    return { outputs: JSON.parse(r.stdout.trim().split('\n').pop()!).outputs as string, iterations: Number(stats![1]) };
  }

  it('the hook finds onnxruntime-node under the pipeline: each call is an iteration, and the outputs are those of the unhooked app', () => {
    const hooked = underRun([]);
    const unhooked = underRun(['--no-hooks']);
    expect(hooked.iterations).toBe(RUNS);
    expect(unhooked.iterations).toBe(0);
    expect(hooked.outputs).toBe(unhooked.outputs);
  }, 240_000);
});

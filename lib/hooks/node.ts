/**
 * The Node hook of `tensorpool run` (NODE_OPTIONS=--require <this file>): onnxruntime-node sessions of an
 * unchanged app use the process pool. Nothing happens until onnxruntime-node is loaded (by require, or by
 * an ESM import, which Node 20-24 also sends through Module._load); then InferenceSession.create turns ONNX
 * Runtime's arena and memory pattern off unless the app set them itself (so its allocations reach malloc,
 * which the process pool serves), and every run() marks an iteration of the process pool. Once a session's
 * create() resolves, the process pool is trimmed (malloc_trim's share of it): what ONNX Runtime used to load
 * the model and freed goes back to the OS before the first request, not at decay's pace.
 *
 * Marks: one when a run starts and no other run of this thread is in flight. Sequential runs give one
 * iteration each; runs that overlap form one iteration together. A mark per run start would give k - 1
 * empty iterations and one holding all k runs' allocations (onnxruntime-node allocates on its own threads,
 * after run() has returned its promise); a busy period is what repeats when the same requests come again.
 *
 * Before each run, dead input and output tensors' buffers are freed where they have piled up (../collect.ts).
 *
 * Worker threads load this file too (NODE_OPTIONS applies to them). Native marks are process-wide and
 * thread-safe: a worker marks the pool itself, at the exact point of its run. Adaptive mode judges marks
 * in the main thread's processPool(), so under it a worker's marks are posted to the main thread (one
 * BroadcastChannel message a run), which marks when its event loop gets to them.
 *
 * The hook never throws into the app: whatever fails disables it with one warning.
 * Sessions of a PooledSession (tensorpool/onnxruntime) are left alone: it marks its runs and collects
 * before them itself (its option collectAfter, by default TENSORPOOL_COLLECT_AFTER), so a run never
 * collects twice.
 */
import Module from 'node:module';
import { BroadcastChannel, isMainThread } from 'node:worker_threads';

import { collectAfter, collectIfGrown } from '../collect.js';
import { MARKED_ELSEWHERE } from './marked-elsewhere.js';

const MARKS_CHANNEL = 'tensorpool:hooks:marks';
const ONNXRUNTIME_MAIN = /[\\/]onnxruntime-node[\\/]dist[\\/]index\.js$/;
/** Requests that may name onnxruntime-node ('onnxruntime-node', a path to its folder or its main file): only these are resolved. */
const MAY_BE_ONNXRUNTIME = /onnxruntime-node/;

interface SessionClass {
  create(...args: unknown[]): Promise<unknown>;
  prototype: { run(...args: unknown[]): Promise<unknown> };
}

let patched: SessionClass | null = null;
let disabled = false;
let inFlight = 0;
let marker: (() => void) | null | undefined; // undefined: not looked up yet; null: no process pool
let collectBytes: number | undefined; // the threshold of ../collect.ts; 0 when off or the pool is not preloaded
let trimmer: { trim(): number } | undefined; // this thread's handle on the process pool, once it trimmed

function disable(error: unknown): void {
  if (disabled) return;
  disabled = true;
  process.emitWarning(`tensorpool: the onnxruntime-node hook is off (${(error as Error)?.message ?? String(error)})`);
}

/** How this thread marks an iteration of the process pool, or null when the process does not preload it. */
function findMarker(): (() => void) | null {
  // Loaded here, not at the top: a process that never loads onnxruntime-node never loads the addon.
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { native } = require('../native.js') as typeof import('../native.js');
  const info = native.processPoolInfo();
  if (info === null) return null;
  if (isMainThread) {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const { processPool, markIterationUnlessMarked } = require('../process/process-pool.js') as typeof import('../process/process-pool.js');
    const pool = processPool();
    return pool && (() => markIterationUnlessMarked(pool));
  }
  if (info.mode === 'adaptive') {
    const channel = new BroadcastChannel(MARKS_CHANNEL);
    channel.unref();
    return () => channel.postMessage(0);
  }
  const handle = new native.NativeProcessPool();
  return () => handle.markIteration(false);
}

/** Whether the preload library starts in adaptive mode in a process with this environment (process_pool.cc). */
function adaptiveByEnvironment(env: NodeJS.ProcessEnv): boolean {
  const adaptive = env.TENSORPOOL_ADAPTIVE;
  return adaptive === '1' || adaptive === 'true' || adaptive === 'on';
}

function markIteration(): void {
  if (disabled) return;
  try {
    if (marker === undefined) marker = findMarker();
    marker?.();
  } catch (error) {
    disable(error);
  }
}

/** Before a run of the process pool's sessions: dead tensors' buffers freed (../collect.ts). A failure turns only this off. */
function collectBeforeRun(): void {
  try {
    if (collectBytes === undefined) {
      if (marker === undefined) marker = findMarker();
      collectBytes = marker === null ? 0 : collectAfter(process.env);
    }
    if (collectBytes > 0) collectIfGrown(collectBytes, inFlight);
  } catch (error) {
    collectBytes = 0;
    process.emitWarning(`tensorpool: the onnxruntime-node hook no longer frees dead tensors early (${(error as Error)?.message ?? String(error)})`);
  }
}

/** Gives the pages of the process pool's free memory back to the OS now (ProcessPool.trim). Pre: the process preloads the library. */
function trimPool(): void {
  if (disabled) return;
  try {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    trimmer ??= new (require('../native.js') as typeof import('../native.js')).native.NativeProcessPool();
    trimmer.trim();
  } catch (error) {
    disable(error);
  }
}

/** The index of InferenceSession.create's options argument among `args` (create's overloads). */
function optionsIndex(args: unknown[]): number {
  if (!(args[0] instanceof ArrayBuffer || (typeof SharedArrayBuffer !== 'undefined' && args[0] instanceof SharedArrayBuffer))) return 1;
  let i = 1; // (buffer, byteOffset?, byteLength?, options?)
  while (i < 3 && typeof args[i] === 'number') i++;
  return i;
}

// The memory pattern stays off too: with it on (the arena off), its one block per input shape came from the
// pool and held more than the tensors served one at a time (peak 0.97x against 0.92x ONNX Runtime's arena on
// bench/service.ts's encoder, 0.83x against 0.68x on PP-OCRv4 detection; docs/benchmarks.md).
function withPoolOptions(args: unknown[]): unknown[] {
  const at = optionsIndex(args);
  const given = args[at];
  if (given !== undefined && (typeof given !== 'object' || given === null)) return args; // ORT will say what is wrong
  const out = args.slice();
  out[at] = { enableCpuMemArena: false, enableMemPattern: false, ...(given as object | undefined) };
  return out;
}

function patch(ort: unknown): void {
  const sessions = (ort as { InferenceSession?: SessionClass } | null)?.InferenceSession;
  if (disabled || !sessions || sessions === patched || typeof sessions.create !== 'function') return;
  patched = sessions;
  const create = sessions.create;
  const run = sessions.prototype.run;
  let pooled: boolean | undefined;
  sessions.create = function (this: unknown, ...args: unknown[]) {
    try {
      if (pooled === undefined) {
        if (marker === undefined) marker = findMarker();
        pooled = marker !== null;
      }
      if (pooled) args = withPoolOptions(args);
    } catch (error) {
      disable(error);
    }
    const session = create.apply(this, args);
    // The app's own handlers see the promise as it is: this one only waits for it (and ignores a rejection).
    if (pooled) Promise.resolve(session).then(trimPool, () => {});
    return session;
  };
  sessions.prototype.run = function (this: Record<symbol, unknown>, ...args: unknown[]) {
    if (this[MARKED_ELSEWHERE] || disabled) return run.apply(this, args);
    collectBeforeRun();
    if (inFlight === 0) markIteration();
    inFlight++;
    let pending: Promise<unknown>;
    try {
      pending = run.apply(this, args);
    } catch (error) {
      inFlight--;
      throw error;
    }
    const settled = (): void => void inFlight--;
    Promise.resolve(pending).then(settled, settled);
    return pending;
  };
}

/** Whether `request`, required from `parent`, loads onnxruntime-node's main file (by name, folder, path or file). */
function isOnnxruntime(moduleInternals: ModuleInternals, request: string, parent: unknown, isMain: unknown): boolean {
  if (request === 'onnxruntime-node' || ONNXRUNTIME_MAIN.test(request)) return true;
  if (!MAY_BE_ONNXRUNTIME.test(request)) return false;
  try {
    return ONNXRUNTIME_MAIN.test(moduleInternals._resolveFilename(request, parent, isMain));
  } catch {
    return false; // load() has just found it: never here
  }
}

interface ModuleInternals {
  _load(request: string, ...rest: unknown[]): unknown;
  _resolveFilename(request: string, parent: unknown, isMain: unknown): string;
}

function install(): void {
  const moduleInternals = Module as unknown as ModuleInternals;
  const load = moduleInternals._load;
  moduleInternals._load = function (this: unknown, request: string, ...rest: unknown[]) {
    const exports = load.call(this, request, ...rest);
    if (patched === null && !disabled && typeof request === 'string' && isOnnxruntime(moduleInternals, request, rest[0], rest[1])) {
      try {
        patch(exports);
      } catch (error) {
        disable(error);
      }
    }
    return exports;
  };
  // Adaptive mode (TENSORPOOL_ADAPTIVE=1, as native/preload reads it): the marks of workers' sessions, made
  // by the main thread's processPool().
  if (isMainThread && adaptiveByEnvironment(process.env)) {
    const channel = new BroadcastChannel(MARKS_CHANNEL);
    channel.onmessage = () => markIteration();
    channel.unref(); // never what keeps the process alive
  }
}

try {
  install();
} catch (error) {
  disable(error);
}

/**
 * Dead tensors' buffers, freed soon: before each onnxruntime-node run of a session that `tensorpool run`'s
 * Node hook wraps (hooks/node.ts) or of a PooledSession (onnxruntime/session.ts).
 *
 * A run's input and output tensors are ArrayBuffers: their memory is freed only when V8 collects them, and
 * V8 starts a collection for such external memory only once it has grown about 64 MiB past what it was at
 * the last one. An inference service whose requests drop their tensors at once therefore holds tens of MiB
 * of dead buffers (44 of the 54 MiB bench/service.ts's encoder requests held at most). Their JS objects are
 * small and die young: a young-generation collection (well under a millisecond when little survives) frees
 * them. So before a run, where this thread's ArrayBuffers have grown by the caller's threshold since they
 * were last looked at after a collection, V8 is asked for one.
 *
 * One watch per thread (this module's state; each worker thread loads its own), whoever asks: two sessions
 * of a thread never collect twice for the same growth.
 *
 * V8's gc() is exposed to a fresh context only (the app's own global object never gets it), unless the app
 * already has it (node --expose-gc).
 */
import v8 from 'node:v8';
import vm from 'node:vm';

type Collect = (options: { type: 'minor' | 'major' }) => void;

/** Default threshold: 4 MiB of ArrayBuffers (bench/service.ts's encoder: peak 0.75-0.82x ONNX Runtime's arena's, 0.92-0.97x without). */
export const DEFAULT_COLLECT_AFTER = 4 * 2 ** 20;

/** The threshold TENSORPOOL_COLLECT_AFTER gives (bytes; 0: off). Unset: the default. Invalid: Error. */
export function collectAfter(env: NodeJS.ProcessEnv): number {
  const text = env.TENSORPOOL_COLLECT_AFTER;
  if (text === undefined || text === '') return DEFAULT_COLLECT_AFTER;
  if (text === 'off') return 0;
  if (!/^\d{1,15}$/.test(text) || Number(text) === 0) throw new Error(`TENSORPOOL_COLLECT_AFTER=${text} is not a number of bytes (such as 4194304) or off`);
  return Number(text);
}

/**
 * V8's gc() for this thread. V8 frees dead ArrayBuffers' memory on a background thread by default, so the
 * frees of one collection land among the allocations that follow at no fixed place: a plan recorded and
 * served under the hook then met departures from its schedule (examples/process: 0.9 to 182.7 faults a run
 * planned, 8.7-9.5 with the sweeping on the collecting thread). The flag is the process's, set once.
 */
function findCollect(): Collect {
  v8.setFlagsFromString('--no-concurrent-array-buffer-sweeping');
  const exposed = (globalThis as { gc?: unknown }).gc;
  if (typeof exposed === 'function') return exposed as Collect;
  v8.setFlagsFromString('--expose-gc');
  try {
    return vm.runInNewContext('gc') as Collect;
  } finally {
    v8.setFlagsFromString('--no-expose-gc');
  }
}

let collect: Collect | undefined;
// This thread's external memory and ArrayBuffers when last looked at after a collection (or lower since);
// undefined until the first call.
let external: number | undefined;
let buffers = 0;
// Calls since the last collection, and the ArrayBuffer bytes a call's run made, as the last collection found.
let runs = 0;
let perRun = 0;

/** The most a collection waits for: V8 starts one of its own about this much external memory later. */
const MAX_COLLECT_AFTER = 64 * 2 ** 20;

/**
 * The growth that makes a collection due: `bytes`, or more where runs make large buffers, so that the
 * buffers of a run in flight see one collection at most. A young object that survives two is promoted to
 * the old generation, where its memory waits for a full collection (tens of MiB later): collecting before
 * every run of a service whose runs overlap (two in flight on a thread, inputs of 1-6 MB) promoted nearly
 * every input, and PP-OCRv4 detection under `tensorpool run` held 224-227 MB of live blocks at its peak
 * against 145-151 MB collecting less often. Between two collections the thread makes at least what its runs
 * in flight make over one run's life: about (inFlight + 1) runs' buffers, doubled for the runs that start
 * and end within it.
 */
function dueAfter(bytes: number, inFlight: number): number {
  return Math.min(Math.max(bytes, 2 * (inFlight + 1) * perRun), Math.max(bytes, MAX_COLLECT_AFTER));
}

/**
 * To call before each run: collects young garbage once this thread's ArrayBuffers have grown by `bytes`
 * (> 0) since the last check after a collection, or by more where each run makes more than that (dueAfter;
 * `inFlight`: the thread's runs already in flight). The first call only looks. The common call costs one V8
 * heap statistics read (~1 us; process.memoryUsage(), which reads the RSS too, only once external memory
 * has grown that much).
 */
export function collectIfGrown(bytes: number, inFlight = 0): void {
  const externalNow = v8.getHeapStatistics().external_memory;
  if (external === undefined) {
    external = externalNow ?? 0;
    buffers = process.memoryUsage().arrayBuffers;
    return;
  }
  runs++;
  const due = dueAfter(bytes, inFlight);
  // ArrayBuffers are counted in V8's external memory as they are made: until it has grown by `due`, they
  // cannot have.
  if (externalNow !== undefined && externalNow - external < due) {
    external = Math.min(external, externalNow);
    return;
  }
  external = externalNow ?? 0;
  const buffersNow = process.memoryUsage().arrayBuffers;
  if (buffersNow - buffers < due) {
    buffers = Math.min(buffers, buffersNow);
    return;
  }
  perRun = (buffersNow - buffers) / runs;
  runs = 0;
  collect ??= findCollect();
  collect({ type: 'minor' });
  buffers = process.memoryUsage().arrayBuffers;
  external = v8.getHeapStatistics().external_memory ?? 0;
}

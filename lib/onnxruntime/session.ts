/**
 * PooledSession: an onnxruntime-node InferenceSession whose tensors live in a pool. One markIteration() per
 * run (on the session's pool, and on the process pool where it serves ONNX Runtime); outputs pre-allocated
 * in the pool once their shapes are known for the inputs' shapes; stream-ordered release, so that a tensor
 * released while a run that reads or writes it is in flight goes back only once that run has settled; and
 * dead ArrayBuffers collected before a run once they pile up (lib/collect.ts).
 */
import { types } from 'node:util';

import { DEFAULT_COLLECT_AFTER, collectAfter, collectIfGrown } from '../collect.js';
import { TensorPoolError } from '../errors.js';
import { MARKED_ELSEWHERE } from '../hooks/marked-elsewhere.js';
import { native } from '../native.js';
import type { OnnxRuntime, OrtRunOptions, OrtSession, OrtSessionOptions, OrtTensor } from '../onnxruntime-peer.js';
import { ProcessPool, processPool } from '../process/process-pool.js';
import { checkBoolean, checkOneOf, checkOptions, describe, invalidArgument } from '../validate.js';
import { POOLED_ACTIVATIONS, lendToOnnxRuntime } from './allocator.js';
import { ortOf } from './load.js';
import { POOLED_TENSOR_TYPES, type PooledTensorType, type TensorSource, checkSource, tensorIn } from './tensor.js';

/** Options of PooledSession.create(). */
export interface PooledSessionOptions {
  /** The onnxruntime-node module (default: loaded from where tensorpool is installed). */
  ort?: OnnxRuntime;
  /** Passed to InferenceSession.create (with POOLED_ACTIVATIONS merged in when activations is 'pool'). */
  sessionOptions?: OrtSessionOptions;
  /**
   * 'pool' (default for a Pool): the session's own allocations come from the pool (lendToOnnxRuntime; ONNX
   * Runtime's arena and, unless sessionOptions ask for it, its memory pattern off). 'runtime': ONNX
   * Runtime's allocator as configured: its arena, or the process pool when run under `tensorpool run` with
   * `enableCpuMemArena: false`. The pool processPool() takes only 'runtime' (its default), and then ONNX
   * Runtime's arena and memory pattern are off unless sessionOptions ask for them: it serves every
   * allocation through malloc.
   */
  activations?: 'pool' | 'runtime';
  /** Pre-allocate outputs in the pool once their shapes are known for the inputs' shapes (default true). */
  poolOutputs?: boolean;
  /** One pool.markIteration() at the start of every run (default true). */
  markIterations?: boolean;
  /**
   * Before a run, where this thread's ArrayBuffers have grown by this many bytes since the last collection,
   * V8 collects its young generation: dead ArrayBuffers (the app's input arrays, ONNX Runtime's outputs
   * never released) give their memory back then instead of tens of MiB later, when V8 would collect on its
   * own. 'off': never. Default: what TENSORPOOL_COLLECT_AFTER says (`tensorpool run --collect-after`), else
   * 4 MiB.
   */
  collectAfter?: number | 'off';
}

/** A run's inputs by name, as onnxruntime-node's InferenceSession.run takes them. */
export type Feeds = Record<string, OrtTensor>;
// A tensor released while runs held it: it goes back when the last of them (`runs` left) settles.
interface WaitingRelease {
  buffer: ArrayBufferLike;
  giveBack: () => void;
  runs: number;
}
interface Flight {
  buffers: Set<ArrayBufferLike>;
  waiting: WaitingRelease[];
}
interface OutputShape {
  type: PooledTensorType;
  dims: number[];
}

/**
 * An InferenceSession whose tensors live in a pool. Release the outputs of run() (and your pooled inputs)
 * with release(), which is safe while runs are in flight: a tensor a run reads or writes goes back to the
 * pool only once that run has settled.
 */
export class PooledSession {
  readonly session: OrtSession;
  readonly pool: TensorSource;
  readonly #ort: OnnxRuntime;
  readonly #poolOutputs: boolean;
  // The pools whose iterations are this session's runs: the session's, and the process pool when it serves
  // ONNX Runtime (activations 'runtime' under `tensorpool run`).
  readonly #marked: { markIteration(): void }[];
  // The growth of this thread's ArrayBuffers that makes a run collect first (0: never, or no longer).
  #collectAfter: number;
  // Output shapes by input signature, learned from the first run with those inputs; null: data-dependent.
  readonly #outputShapes = new Map<string, Map<string, OutputShape> | null>();
  // Outputs ONNX Runtime allocated (onnxruntime-node's ArrayBuffers in the C heap), and those released.
  readonly #runtimeOutputs = new WeakSet<OrtTensor>();
  readonly #freedOutputs = new WeakSet<OrtTensor>();
  // The runs in flight: the buffers each reads or writes, and the releases waiting for it to settle.
  readonly #inFlight = new Set<Flight>();
  readonly #releasing = new WeakSet<ArrayBufferLike>();
  #closed = false;

  private constructor(session: OrtSession, pool: TensorSource, ort: OnnxRuntime, poolOutputs: boolean, marked: { markIteration(): void }[], collectAfter: number) {
    this.session = session;
    this.pool = pool;
    this.#ort = ort;
    this.#poolOutputs = poolOutputs;
    this.#marked = marked;
    this.#collectAfter = collectAfter;
  }

  /**
   * Makes an ONNX Runtime session of `model` (a file's path or its bytes) whose tensors come from `pool`: a
   * Pool, or the process pool (processPool(), under `tensorpool run`). Fails with ERR_TP_ONNXRUNTIME when
   * onnxruntime-node cannot be loaded.
   */
  static async create(pool: TensorSource, model: string | Uint8Array, options?: PooledSessionOptions): Promise<PooledSession> {
    checkSource(pool);
    if (typeof model !== 'string' && !(model instanceof Uint8Array)) {
      throw invalidArgument('type', `model must be a path or a Uint8Array, got ${describe(model)}`);
    }
    const o = checkOptions<PooledSessionOptions>(options, 'options', ['ort', 'sessionOptions', 'activations', 'poolOutputs', 'markIterations', 'collectAfter']);
    const ort = ortOf(o.ort);
    const whole = pool instanceof ProcessPool;
    const activations = o.activations === undefined ? (whole ? 'runtime' : 'pool') : checkOneOf(o.activations, 'options.activations', ['pool', 'runtime'] as const);
    if (whole && activations === 'pool') {
      throw invalidArgument('range', "processPool() serves ONNX Runtime through malloc: use activations 'runtime' (its default), not 'pool'");
    }
    const poolOutputs = o.poolOutputs === undefined ? true : checkBoolean(o.poolOutputs, 'options.poolOutputs');
    const markIterations = o.markIterations === undefined ? true : checkBoolean(o.markIterations, 'options.markIterations');
    const collectBytes = checkCollectAfter(o.collectAfter);
    const given = o.sessionOptions ?? {};
    if (typeof given !== 'object' || given === null || Array.isArray(given)) {
      throw invalidArgument('type', `options.sessionOptions must be an object, got ${describe(given)}`);
    }
    let sessionOptions: OrtSessionOptions = { ...given };
    // The arena would keep ONNX Runtime's allocations from reaching malloc, and the pattern lays each input
    // shape out in one block of its own (see below).
    if (whole) sessionOptions = { enableCpuMemArena: false, enableMemPattern: false, ...given };
    if (activations === 'pool' && !whole) {
      lendToOnnxRuntime(pool, { ort });
      const extra = (given.extra ?? {}) as Record<string, unknown>;
      const session = { ...((extra.session as Record<string, unknown>) ?? {}), ...POOLED_ACTIVATIONS.extra.session };
      // ONNX Runtime's memory pattern lays each input shape's activations out in one block of its own; the
      // pool serves the tensors one by one in less (PP-OCRv4 detection, six shapes: the steady cycle's
      // lower bound is 161 MiB with the pattern, 117 MiB without). A pattern asked for is kept.
      sessionOptions = { enableMemPattern: false, ...given, ...POOLED_ACTIVATIONS, extra: { ...extra, session } };
    }
    const session =
      typeof model === 'string' ? await ort.InferenceSession.create(model, sessionOptions) : await ort.InferenceSession.create(model, sessionOptions);
    // Its runs are marked here (or, with markIterations false, not at all): `tensorpool run`'s hook keeps off.
    Object.defineProperty(session, MARKED_ELSEWHERE, { value: true });
    const processAllocator = activations === 'runtime' && !whole ? processPool() : null;
    const marked = !markIterations ? [] : processAllocator ? [pool, processAllocator] : [pool];
    return new PooledSession(session, pool, ort, poolOutputs, marked, collectBytes);
  }

  // A failure (V8 refusing a flag) costs the runs only the early frees: one warning, and no more tries.
  #collectIfGrown(): void {
    try {
      collectIfGrown(this.#collectAfter, this.#inFlight.size); // before this run joins them
    } catch (error) {
      this.#collectAfter = 0;
      process.emitWarning(`tensorpool: this PooledSession no longer frees dead tensors early (${(error as Error)?.message ?? String(error)})`);
    }
  }

  /** A tensor over a fresh pool block (see pooledTensor). */
  tensor(type: PooledTensorType, dims: readonly number[]): OrtTensor {
    return tensorIn(this.pool, this.#ort, type, dims);
  }

  /** Runs in flight (called and not settled). */
  get inFlight(): number {
    return this.#inFlight.size;
  }

  /**
   * Runs the model. `outputs` may give pooled tensors to write outputs into; otherwise, once the output
   * shapes for these input shapes are known (after the first run with them), outputs are pre-allocated in
   * the pool. The outputs returned are pool tensors when pre-allocated, ONNX Runtime's otherwise; release()
   * takes both.
   */
  async run(feeds: Feeds, outputs?: Record<string, OrtTensor>, runOptions?: OrtRunOptions): Promise<Record<string, OrtTensor>> {
    if (this.#closed) throw new TensorPoolError('ERR_TP_CLOSED', 'the session is closed');
    const key = this.#signature(feeds);
    if (outputs !== undefined) this.#checkOutputs(outputs, key);
    // Before the mark, as the Node hook does: what the collection frees belongs to the iterations before.
    if (this.#collectAfter > 0) this.#collectIfGrown();
    for (const pool of this.#marked) pool.markIteration();
    const preallocated = outputs === undefined && this.#poolOutputs ? this.#allocateOutputs(key) : undefined;
    const fetches = outputs ?? preallocated;
    const pending = (fetches ? this.session.run(feeds, fetches, runOptions ?? {}) : this.session.run(feeds, runOptions ?? {})) as Promise<Record<string, OrtTensor>>;
    // Registered before run() returns, so that a release() right after the call (before awaiting) waits.
    const flight: Flight = { buffers: new Set(), waiting: [] };
    for (const name in feeds) flight.buffers.add((feeds[name].data as ArrayBufferView).buffer);
    if (fetches) for (const name in fetches) flight.buffers.add((fetches[name].data as ArrayBufferView).buffer);
    this.#inFlight.add(flight);
    const done = this.#outcome(pending, feeds, key, outputs, preallocated, runOptions);
    // Before this run()'s own continuation: the tensors released during the run are back when it returns.
    const landed = (): void => this.#landed(flight);
    done.then(landed, landed);
    const { result, fetched } = await done;
    if (!fetched) return result;
    if (fetches) {
      // onnxruntime-node returns a copy of each output written into `fetches`, in a new ArrayBuffer of the C
      // heap that nobody will see. Left to the garbage collector, such copies are freed in bursts, glibc
      // gives its heap back to the OS and the next runs fault it in again: free each one now.
      for (const name in fetches) {
        if (name in result) freeOwnBuffer(result[name], flight.buffers);
        result[name] = fetches[name];
      }
    } else {
      this.#learn(key, result);
    }
    for (const [name, tensor] of Object.entries(result)) if (!fetches || !(name in fetches)) this.#runtimeOutputs.add(tensor);
    return result;
  }

  // What the run gave; `fetched` false when ONNX Runtime refused the pre-allocated outputs because their
  // shapes depend on the input data, not only on its shape, and the same inputs ran again without them:
  // within the run's flight, so that inputs released meanwhile stay held until this second run has read them.
  async #outcome(
    pending: Promise<Record<string, OrtTensor>>,
    feeds: Feeds,
    key: string,
    outputs: Record<string, OrtTensor> | undefined,
    preallocated: Record<string, OrtTensor> | undefined,
    runOptions: OrtRunOptions | undefined,
  ): Promise<{ result: Record<string, OrtTensor>; fetched: boolean }> {
    try {
      return { result: await pending, fetched: true };
    } catch (error) {
      if (preallocated) for (const t of Object.values(preallocated)) this.pool.release(t.data as ArrayBufferView);
      const message = String((error as Error)?.message ?? '');
      if (!/has shape .* but the computed output shape/.test(message)) throw error;
      if (outputs) {
        throw new TensorPoolError('ERR_TP_OUTPUT_SHAPE', `an output given does not match what the model computes: ${message.split('\n')[0]}`, { cause: error });
      }
      this.#outputShapes.set(key, null); // no more pre-allocation for these inputs
      return { result: await this.#runWithoutOutputs(feeds, runOptions), fetched: false };
    }
  }

  async #runWithoutOutputs(feeds: Feeds, runOptions?: OrtRunOptions): Promise<Record<string, OrtTensor>> {
    const result = (await this.session.run(feeds, runOptions ?? {})) as Record<string, OrtTensor>;
    for (const tensor of Object.values(result)) this.#runtimeOutputs.add(tensor);
    return result;
  }

  /**
   * Gives tensors back: a pool tensor to the pool (its buffer detached), an output ONNX Runtime allocated
   * itself to the C heap (its buffer detached and freed now rather than at a garbage collection, unless
   * another tensor views it too). A tensor that a run in flight reads or writes goes back once that run has
   * settled; others at once. Throws for a tensor already released or neither from the pool nor a run's output.
   */
  release(...tensors: OrtTensor[]): void {
    for (const tensor of tensors) {
      if (!tensor || typeof tensor !== 'object' || !ArrayBuffer.isView((tensor as OrtTensor).data)) {
        throw invalidArgument('type', `release() takes tensors, got ${describe(tensor)}`);
      }
      const view = tensor.data as ArrayBufferView;
      const buffer = view.buffer;
      if (this.#releasing.has(buffer) || this.#freedOutputs.has(tensor)) {
        throw new TensorPoolError('ERR_TP_DOUBLE_RELEASE', 'this tensor was already released (it goes back once its run settles)');
      }
      let giveBack = (): void => this.pool.release(view);
      if (this.#runtimeOutputs.has(tensor)) {
        this.#runtimeOutputs.delete(tensor);
        this.#freedOutputs.add(tensor);
        giveBack = () => freeOwnBuffer(tensor, new Set());
      }
      let release: WaitingRelease | undefined;
      for (const run of this.#inFlight) {
        if (!run.buffers.has(buffer)) continue;
        release ??= { buffer, giveBack, runs: 0 };
        release.runs++;
        run.waiting.push(release);
      }
      if (release === undefined) giveBack();
      else this.#releasing.add(buffer);
    }
  }

  // A run settled: it no longer holds its buffers, and those released while it ran go back once no other run
  // in flight holds them.
  #landed(flight: Flight): void {
    this.#inFlight.delete(flight);
    for (const release of flight.waiting) {
      if (--release.runs > 0) continue;
      this.#releasing.delete(release.buffer);
      try {
        release.giveBack();
      } catch (error) {
        process.emitWarning(`tensorpool: a tensor released during a run could not go back: ${(error as Error).message}`);
      }
    }
  }

  /** Releases the ONNX Runtime session. ERR_TP_BUSY while a run is in flight: await it first. */
  async close(): Promise<void> {
    if (this.#closed) return;
    if (this.#inFlight.size > 0) {
      throw new TensorPoolError('ERR_TP_BUSY', `${this.#inFlight.size} run() call(s) still in flight: await them before close()`);
    }
    this.#closed = true;
    await this.session.release();
  }

  // The inputs' names, types and dims, in the order given: feeds built the same way each run give the same
  // key (another order only learns the output shapes again).
  #signature(feeds: Feeds): string {
    if (!feeds || typeof feeds !== 'object') throw invalidArgument('type', `feeds must be an object of tensors, got ${describe(feeds)}`);
    let key = '';
    for (const name in feeds) {
      const tensor = feeds[name];
      this.#checkTensor(tensor, 'input', name);
      key += `${name}:${tensor.type}[${tensor.dims}];`;
    }
    return key;
  }

  #checkTensor(tensor: OrtTensor, kind: 'input' | 'output', name: string): void {
    if (!(tensor instanceof this.#ort.Tensor)) throw invalidArgument('type', `${kind} '${name}' must be a Tensor, got ${describe(tensor)}`);
    const data = tensor.data as ArrayBufferView;
    if (ArrayBuffer.isView(data) && (data.byteLength === 0 || this.#releasing.has(data.buffer)) && tensor.size > 0) {
      throw new TensorPoolError('ERR_TP_RELEASED', `${kind} '${name}' was released: its buffer is detached or going back to the pool`);
    }
  }

  #checkOutputs(outputs: Record<string, OrtTensor>, key: string): void {
    if (!outputs || typeof outputs !== 'object') throw invalidArgument('type', `outputs must be an object of tensors, got ${describe(outputs)}`);
    const known = this.#outputShapes.get(key);
    for (const [name, tensor] of Object.entries(outputs)) {
      this.#checkTensor(tensor, 'output', name);
      const expected = known?.get(name);
      if (expected && (expected.type !== tensor.type || expected.dims.join(',') !== tensor.dims.join(','))) {
        throw new TensorPoolError(
          'ERR_TP_OUTPUT_SHAPE',
          `output '${name}' is ${tensor.type}[${tensor.dims.join(',')}] but the model computes ${expected.type}[${expected.dims.join(',')}] for these inputs`,
        );
      }
    }
  }

  #allocateOutputs(key: string): Record<string, OrtTensor> | undefined {
    const shapes = this.#outputShapes.get(key);
    if (!shapes) return undefined;
    const fetches: Record<string, OrtTensor> = {};
    try {
      for (const [name, shape] of shapes) fetches[name] = this.tensor(shape.type, shape.dims);
    } catch (error) {
      for (const t of Object.values(fetches)) this.pool.release(t.data as ArrayBufferView);
      throw error;
    }
    return fetches;
  }

  #learn(key: string, result: Record<string, OrtTensor>): void {
    if (this.#outputShapes.has(key)) return;
    const shapes = new Map<string, OutputShape>();
    for (const [name, tensor] of Object.entries(result)) {
      if (!(POOLED_TENSOR_TYPES as readonly string[]).includes(tensor.type)) return; // strings, maps: not poolable
      shapes.set(name, { type: tensor.type as PooledTensorType, dims: [...tensor.dims] });
    }
    this.#outputShapes.set(key, shapes);
  }
}

/** options.collectAfter as bytes (0: off); unset, TENSORPOOL_COLLECT_AFTER's (as the Node hook reads it) or the default. */
function checkCollectAfter(value: unknown): number {
  if (value === 'off') return 0;
  if (value === undefined) {
    try {
      return collectAfter(process.env);
    } catch (error) {
      throw invalidArgument('range', `${(error as Error).message}: options.collectAfter is unset, so PooledSession reads it`);
    }
  }
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1) {
    throw invalidArgument(
      typeof value === 'number' ? 'range' : 'type',
      `options.collectAfter must be a number of bytes (a positive integer, such as ${DEFAULT_COLLECT_AFTER}) or 'off', got ${describe(value)}`,
    );
  }
  return value;
}

/**
 * Frees a tensor's memory at once by detaching its ArrayBuffer, when the tensor views the whole of it and
 * `kept` does not hold it (a buffer shared with another tensor is left to the garbage collector).
 */
function freeOwnBuffer(tensor: OrtTensor | undefined, kept: ReadonlySet<ArrayBufferLike>): void {
  const view = tensor?.data;
  if (!ArrayBuffer.isView(view) || !types.isArrayBuffer(view.buffer) || kept.has(view.buffer)) return;
  if (view.byteOffset === 0 && view.byteLength === view.buffer.byteLength) native.freeBuffer(view.buffer);
}

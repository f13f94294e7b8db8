/**
 * Static offset planning: every buffer gets a fixed offset in one arena so that buffers that conflict
 * (live at the same time, or mutually exclusive operators) never overlap. The planners run natively
 * (native/planner); this side takes the inputs, derives S1's mutex relations from operator graphs, and
 * checks every result with the native verifier.
 */
import { TensorPoolError } from '../errors.js';
import { native } from '../native.js';
import { problemFromTrace, type Problem } from '../trace/problem.js';
import { Trace } from '../trace/trace.js';
import { checkInteger, checkOneOf, checkOptions, describe } from '../validate.js';

/**
 * A static planner: 'greedy-size' (largest first, each at the lowest offset that fits), 's1' (first fit in
 * size order; operator graphs add their mutex relations), 's2' (2-D strip packing), 's3' (a genetic search
 * over placement orders), or 'best' (constructive heuristics, then an exact search within the time limit:
 * the lowest peak found).
 */
export type Strategy = 'greedy-size' | 's1' | 's2' | 's3' | 'best';
/** Every Strategy planOffsets() takes. */
export const STRATEGIES: readonly Strategy[] = ['greedy-size', 's1', 's2', 's3', 'best'];

/** Buffers with sizes and an explicit conflict graph: two buffers conflict when they may not overlap. */
export interface ConflictProblem {
  name?: string;
  ids?: string[];
  sizes: ArrayLike<number>;
  /** Pairs of buffer indices. */
  conflicts: ArrayLike<readonly [number, number]>;
}

/** S1's input: a model's computation graph. Each operator needs one block for its output. */
export interface OperatorGraph {
  name?: string;
  operators: { id: string | number; size: number }[];
  /** [producer, consumer] pairs of operator ids. */
  edges: [string | number, string | number][];
  /** Execution order (operator ids); default: a topological order (Kahn, by declaration order). */
  order?: (string | number)[];
}

/**
 * What planOffsets() plans: buffers with lifetimes (a Problem or a Trace), or with an explicit conflict
 * graph.
 */
export type PlanningInput = Problem | Trace | ConflictProblem | OperatorGraph;

/** Options of planOffsets(). */
export interface PlanOffsetsOptions {
  strategy?: Strategy;
  /** S2, S3 and best search until then and return the best found. Default 10000. */
  timeLimitMs?: number;
  /** S3's random generator. Default 1. */
  seed?: number;
  /** The arena's size, when fixed: it must hold the largest buffer; `fitsCapacity` says whether the layout fits. */
  capacity?: number;
}

/**
 * planOffsets()'s answer: an offset per buffer, the arena's height, the lower bound, and the verifier's
 * verdict.
 */
export interface OffsetLayout {
  strategy: Strategy;
  /** Per buffer, in the input's order. */
  offsets: Float64Array;
  sizes: Float64Array;
  ids: string[];
  /** The arena's height: the highest end. */
  peak: number;
  /** Intervals: the most bytes live at once. Graphs: the heaviest clique found (exact unless lowerBoundExact is false). */
  lowerBound: number;
  lowerBoundExact: boolean;
  /** The peak is proven minimal. */
  optimal: boolean;
  /** The verifier's verdict: no two conflicting buffers overlap. */
  valid: boolean;
  ms: number;
  notes: string;
  /** greedy-size and s1: the order buffers were placed in (indices). */
  order: Uint32Array | null;
  capacity: number | null;
  fitsCapacity: boolean | null;
}

function bad(message: string): TensorPoolError {
  return new TensorPoolError('ERR_TP_BAD_PROBLEM', message);
}

function isOperatorGraph(input: unknown): input is OperatorGraph {
  return typeof input === 'object' && input !== null && 'operators' in input;
}
function isConflictProblem(input: unknown): input is ConflictProblem {
  return typeof input === 'object' && input !== null && 'conflicts' in input && 'sizes' in input;
}

/**
 * S1's mutex relations: operator X may not reuse the memory of (1) an operator joined to it by an edge,
 * (2) an operator on a parallel branch (neither reaches the other), (3) a network output (an operator with
 * inputs but no consumer in the graph) executed before X.
 */
export function mutexGraph(graph: OperatorGraph): ConflictProblem {
  if (!Array.isArray(graph.operators) || graph.operators.length === 0) throw bad('graph.operators must be a non-empty array');
  if (!Array.isArray(graph.edges)) throw bad(`graph.edges must be an array, got ${describe(graph.edges)}`);
  const index = new Map<string, number>();
  graph.operators.forEach((op, i) => {
    const id = String(op?.id);
    if (op === null || typeof op !== 'object' || op.id === undefined) throw bad(`graph.operators[${i}] must be { id, size }`);
    if (index.has(id)) throw bad(`graph.operators[${i}]: operator id ${JSON.stringify(id)} appears twice`);
    if (!Number.isSafeInteger(op.size) || op.size < 1) throw bad(`graph.operators[${i}].size must be a positive integer, got ${describe(op.size)}`);
    index.set(id, i);
  });
  const n = graph.operators.length;
  const successors: number[][] = Array.from({ length: n }, () => []);
  const predecessors: number[][] = Array.from({ length: n }, () => []);
  graph.edges.forEach((edge, e) => {
    if (!Array.isArray(edge) || edge.length !== 2) throw bad(`graph.edges[${e}] must be [producer, consumer]`);
    const [from, to] = edge.map((id) => index.get(String(id)));
    if (from === undefined || to === undefined) {
      throw bad(`graph.edges[${e}] names an operator that does not exist: ${JSON.stringify(edge)}`);
    }
    if (from === to) throw bad(`graph.edges[${e}] joins operator ${JSON.stringify(edge[0])} to itself`);
    successors[from].push(to);
    predecessors[to].push(from);
  });
  const position = executionOrder(graph, index, successors, predecessors);

  // Reachability by depth-first search from every operator (graphs of operators are small).
  const reaches: Uint8Array[] = Array.from({ length: n }, () => new Uint8Array(n));
  for (let s = 0; s < n; s++) {
    const stack = [...successors[s]];
    while (stack.length) {
      const v = stack.pop()!;
      if (reaches[s][v]) continue;
      reaches[s][v] = 1;
      stack.push(...successors[v]);
    }
  }
  const isOutput = (v: number) => successors[v].length === 0 && predecessors[v].length > 0;
  const conflicts: [number, number][] = [];
  for (let a = 0; a < n; a++) {
    for (let b = a + 1; b < n; b++) {
      const joined = successors[a].includes(b) || successors[b].includes(a);
      const parallel = !reaches[a][b] && !reaches[b][a];
      const earlierOutput = (isOutput(a) && position[a] < position[b]) || (isOutput(b) && position[b] < position[a]);
      if (joined || parallel || earlierOutput) conflicts.push([a, b]);
    }
  }
  return {
    name: graph.name,
    ids: graph.operators.map((op) => String(op.id)),
    sizes: graph.operators.map((op) => op.size),
    conflicts,
  };
}

function executionOrder(graph: OperatorGraph, index: Map<string, number>, successors: number[][], predecessors: number[][]): number[] {
  const n = graph.operators.length;
  const position = new Array<number>(n).fill(-1);
  if (graph.order !== undefined) {
    if (!Array.isArray(graph.order) || graph.order.length !== n) throw bad('graph.order must list every operator once');
    graph.order.forEach((id, k) => {
      const v = index.get(String(id));
      if (v === undefined || position[v] >= 0) throw bad(`graph.order[${k}]: ${JSON.stringify(id)} is unknown or listed twice`);
      position[v] = k;
    });
    for (let v = 0; v < n; v++) {
      for (const w of successors[v]) {
        if (position[w] < position[v]) throw bad(`graph.order runs ${graph.operators[w].id} before its input ${graph.operators[v].id}`);
      }
    }
    return position;
  }
  const waiting = predecessors.map((p) => p.length);
  const ready: number[] = [];
  for (let v = 0; v < n; v++) if (waiting[v] === 0) ready.push(v);
  let next = 0;
  while (ready.length) {
    ready.sort((a, b) => a - b);
    const v = ready.shift()!;
    position[v] = next++;
    for (const w of successors[v]) if (--waiting[w] === 0) ready.push(w);
  }
  if (next < n) throw bad('graph.edges form a cycle: a computation graph must be acyclic');
  return position;
}

interface NativeInput {
  native: { sizes: Float64Array; lower?: Float64Array; upper?: Float64Array; neighbourStarts?: Float64Array; neighbours?: Float64Array };
  ids: string[];
}

function fromConflicts(problem: ConflictProblem): NativeInput {
  const n = problem.sizes.length;
  const sizes = Float64Array.from(problem.sizes);
  sizes.forEach((size, i) => {
    if (!Number.isSafeInteger(size) || size < 1) throw bad(`sizes[${i}] must be a positive integer, got ${describe(size)}`);
  });
  const lists: Set<number>[] = Array.from({ length: n }, () => new Set());
  for (let e = 0; e < problem.conflicts.length; e++) {
    const pair = problem.conflicts[e];
    const [a, b] = pair ?? [];
    if (!Number.isInteger(a) || !Number.isInteger(b) || a < 0 || b < 0 || a >= n || b >= n) {
      throw bad(`conflicts[${e}] names a buffer that does not exist: ${JSON.stringify(pair)} (there are ${n})`);
    }
    if (a === b) throw bad(`conflicts[${e}] pairs buffer ${a} with itself`);
    lists[a].add(b);
    lists[b].add(a);
  }
  const starts = new Float64Array(n + 1);
  const flat: number[] = [];
  for (let b = 0; b < n; b++) {
    for (const c of [...lists[b]].sort((x, y) => x - y)) flat.push(c); // a spread of 100k+ overflows the stack
    starts[b + 1] = flat.length;
  }
  return {
    native: { sizes, neighbourStarts: starts, neighbours: Float64Array.from(flat) },
    ids: problem.ids ?? Array.from({ length: n }, (_, i) => String(i)),
  };
}

function toNativeInput(input: PlanningInput): NativeInput {
  const converted = nativeInputOf(input);
  checkExact(converted);
  return converted;
}

/**
 * Offsets and peaks travel as JS numbers, exact up to 2^53 - 1: no layout puts a buffer above the sum of all
 * sizes, so a problem whose sizes sum to more is refused rather than answered with rounded offsets.
 */
function checkExact({ native: problem, ids }: NativeInput): void {
  let total = 0;
  for (let b = 0; b < problem.sizes.length; b++) {
    total += problem.sizes[b];
    if (total > Number.MAX_SAFE_INTEGER || !Number.isInteger(problem.sizes[b])) {
      throw bad(
        Number.isInteger(problem.sizes[b])
          ? `the sizes sum to more than 2^53 - 1 bytes (${Number.MAX_SAFE_INTEGER}), past which offsets and the peak are not exact`
          : `buffer ${ids[b] ?? b}: size must be an integer, got ${problem.sizes[b]}`,
      );
    }
  }
}

function nativeInputOf(input: PlanningInput): NativeInput {
  if (input instanceof Trace) return nativeInputOf(problemFromTrace(input));
  if (isOperatorGraph(input)) return fromConflicts(mutexGraph(input));
  if (isConflictProblem(input)) return fromConflicts(input);
  const p = input as Problem;
  if (!p || !p.size || !p.lower || !p.upper) throw bad(`expected a problem, a trace, a conflict graph or an operator graph, got ${describe(input)}`);
  for (let b = 0; b < p.size.length; b++) {
    if (!(p.size[b] >= 1)) throw bad(`buffer ${p.ids[b] ?? b}: size must be positive, got ${p.size[b]}`);
    if (!(p.upper[b] > p.lower[b])) throw bad(`buffer ${p.ids[b] ?? b}: the lifetime [${p.lower[b]}, ${p.upper[b]}) is empty or inverted`);
  }
  return { native: { sizes: Float64Array.from(p.size), lower: Float64Array.from(p.lower), upper: Float64Array.from(p.upper) }, ids: p.ids };
}

/**
 * Gives every buffer an offset such that no two that conflict (live at once, or joined in the conflict graph)
 * overlap, keeping the arena's height (the peak) low; `strategy` picks the planner (default 'best').
 */
export function planOffsets(input: PlanningInput, options?: PlanOffsetsOptions): OffsetLayout {
  const o = checkOptions<PlanOffsetsOptions>(options, 'options', ['strategy', 'timeLimitMs', 'seed', 'capacity']);
  const strategy = o.strategy === undefined ? 'best' : checkOneOf(o.strategy, 'options.strategy', STRATEGIES);
  const timeLimitMs = o.timeLimitMs === undefined ? 10000 : checkInteger(o.timeLimitMs, 'options.timeLimitMs', 1, 24 * 3600 * 1000);
  const seed = o.seed === undefined ? 1 : checkInteger(o.seed, 'options.seed', 0, 2 ** 32);
  const { native: problem, ids } = toNativeInput(input);
  if (problem.sizes.length === 0) throw bad('nothing to plan: the problem has no buffers');
  const largest = problem.sizes.reduce((m, v) => Math.max(m, v), 0); // a spread of 100k+ sizes overflows the stack
  const capacity = o.capacity === undefined ? null : checkInteger(o.capacity, 'options.capacity', 1);
  if (capacity !== null && capacity < largest) {
    const b = problem.sizes.indexOf(largest);
    throw bad(`capacity ${capacity} cannot hold buffer ${ids[b]} of ${largest} bytes`);
  }
  let r;
  try {
    r = native.planOffsets(problem, { strategy, timeLimitMs, seed });
  } catch (error) {
    if ((error as { code?: string }).code === 'ERR_TP_BAD_PROBLEM') throw bad((error as Error).message);
    throw error;
  }
  return {
    strategy,
    offsets: r.offsets,
    sizes: problem.sizes,
    ids,
    peak: r.peak,
    lowerBound: r.lowerBound,
    lowerBoundExact: r.lowerBoundExact,
    optimal: r.optimal,
    valid: r.valid,
    ms: r.ms,
    notes: r.notes + (r.valid ? '' : `; INVALID: ${r.why}`),
    order: strategy === 'greedy-size' || strategy === 's1' ? r.order : null,
    capacity,
    fitsCapacity: capacity === null ? null : r.peak <= capacity,
  };
}

/** Checks offsets against a problem with the native verifier: { valid, why }. */
export function verifyOffsets(input: PlanningInput, offsets: ArrayLike<number>): { valid: boolean; why: string } {
  const { native: problem } = toNativeInput(input);
  if (offsets.length !== problem.sizes.length) return { valid: false, why: `expected ${problem.sizes.length} offsets, got ${offsets.length}` };
  return native.verifyOffsets(problem, Float64Array.from(offsets));
}

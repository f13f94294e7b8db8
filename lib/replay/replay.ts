/**
 * replay(trace): runs a trace against tensorpool and the allocators people would pick instead, each in a
 * worker process of its own, interleaved (one repetition of each in turn, rotating the order), and
 * reports medians of the steady state (the last half of the repetitions).
 */
import { fork, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { TensorPoolError } from '../errors.js';
import { packageRoot, type TouchMode } from '../native.js';
import { OffsetPlan } from '../offsets/offset-plan.js';
import { Plan } from '../plan/plan.js';
import { machineInfo, type MachineInfo } from '../report/machine.js';
import { median, medianInterval, type MedianInterval } from '../report/stats.js';
import { readTrace } from '../trace/read.js';
import { Trace } from '../trace/trace.js';
import { train } from '../plan/train.js';
import { checkInteger, checkOneOf, checkOptions, describe, invalidArgument } from '../validate.js';
import { ALLOCATOR_NAMES, isAvailable, isPeer, missingMessage, resolveAllocator, usesClassPlan, usesOffsetPlan, type AllocatorName, type AllocatorSpec } from './allocators.js';
import type { FromWorker, PoolCounters, RepetitionRecord, ToWorker } from './protocol.js';

export type { TouchMode };
/** The ways a replay touches the memory it gets (ReplayOptions.touch). */
export const TOUCH_MODES: readonly TouchMode[] = ['pages', 'full', 'none', 'verify'];

/** Options of replay(). */
export interface ReplayOptions {
  /** Allocators to measure. Default: every one available here. */
  allocators?: AllocatorName[];
  /** Repetitions per allocator (each starts empty). Default 20. */
  reps?: number;
  /**
   * How each allocation is touched: one write per 4 KiB page (default), all of it, or not at all; 'verify'
   * writes a stamp of the buffer's own at every page and at its end and checks them before the free, so a
   * block handed out twice, or written by someone else while live, counts in `corruptions`.
   */
  touch?: TouchMode;
  /** tensorpool's plan (a Plan or a plan file). Default: trained from the trace itself (order and interval 'auto'). */
  plan?: Plan | string;
  /** tensorpool-offsets' and ideal's plan (an OffsetPlan or its file). Default: planned from the trace itself ('best', 10 s). */
  offsetPlan?: OffsetPlan | string;
  /** Called after every repetition of every allocator. */
  onProgress?: (done: number, total: number, allocator: string) => void;
}

/** What replay() measured for one allocator. */
export interface AllocatorResult {
  allocator: AllocatorName;
  /** False when the allocator is not installed (see `error`) or its worker failed. */
  available: boolean;
  error?: string;
  /** Median over the steady repetitions of the repetition's time / (allocs + releases); touching included. */
  nsPerOp: number;
  /** Median time inside allocate() / release() per call, from the repetitions that time every operation. */
  allocNs: number | null;
  releaseNs: number | null;
  /** Median time of one whole repetition. */
  repetitionMs: number;
  /** touch 'verify': buffers whose stamps had changed by their free, over every repetition (else 0). */
  corruptions: number;
  /** Page faults per repetition in the steady state (mean over the last half). */
  steadyMinorFaultsPerRep: number;
  steadyMajorFaultsPerRep: number;
  /** Peak RSS of the worker, and its growth over the RSS at the start of the replay. */
  peakRssBytes: number;
  rssGrowthBytes: number;
  lowerBoundBytes: number;
  /** rssGrowthBytes / lowerBoundBytes. */
  rssVsLowerBound: number;
  /** nsPerOp / the best peer's nsPerOp in this run (ReplayReport.bestPeer). */
  vsBestPeer: number | null;
  /** The spread of vsBestPeer: this allocator's time over the best peer's, repetition by repetition (pairedTime). */
  vsBestPeerInterval: MedianInterval | null;
  /**
   * The spread over the steady repetitions: the 95% intervals of the medians nsPerOp, allocNs and
   * releaseNs (medianInterval), and the fewest and most minor faults of a repetition.
   */
  spread: {
    nsPerOp: MedianInterval;
    allocNs: MedianInterval | null;
    releaseNs: MedianInterval | null;
    minorFaults: { min: number; max: number };
  };
  faultSource: string;
  /** tensorpool's allocators only: how their requests were served, per repetition. */
  pool?: PoolCounters;
  repetitions: RepetitionRecord[];
}

/** replay()'s answer: the trace, the plans used, the machine, and per allocator its results. */
export interface ReplayReport {
  trace: string;
  events: number;
  buffers: number;
  reps: number;
  touch: TouchMode;
  lowerBoundBytes: number;
  machine: MachineInfo;
  plan: { arenaBytes: number; interval: number; order: unknown; source: unknown; warnings: string[] } | null;
  offsetPlan: { height: number; strategy: string; optimal: boolean; source: unknown } | null;
  /**
   * The peer every `vsBestPeer` divides by: of the peers measured (malloc, jemalloc, mimalloc, tcmalloc;
   * isPeer), the one with the lowest median ns/op in this run. Null when no peer ran.
   */
  bestPeer: AllocatorName | null;
  results: AllocatorResult[];
}

const REPLAY_OPTIONS = ['allocators', 'reps', 'touch', 'plan', 'offsetPlan', 'onProgress'] as const;
const WORKER = path.join(packageRoot, 'dist', 'replay', 'worker.js');

/** A worker process and the one request it has in flight. */
class WorkerProcess {
  readonly #child: ChildProcess;
  #pending: { resolve: (m: FromWorker) => void; reject: (e: Error) => void } | undefined;
  #exited: Error | undefined;

  constructor(spec: AllocatorSpec) {
    const env = { ...process.env };
    delete env.LD_PRELOAD;
    if (spec.library) env.LD_PRELOAD = spec.library;
    env.TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD = String(2 ** 50); // no "large alloc" chatter on stderr
    this.#child = fork(WORKER, [], { env, execArgv: [], stdio: ['ignore', 'ignore', 'pipe', 'ipc'] });
    let stderr = '';
    this.#child.stderr!.on('data', (chunk) => (stderr += chunk));
    this.#child.on('message', (message: FromWorker) => {
      const pending = this.#pending;
      this.#pending = undefined;
      if (message.type === 'error') pending?.reject(new Error(message.message));
      else pending?.resolve(message);
    });
    this.#child.on('exit', (code, signal) => {
      this.#exited = new Error(`the ${spec.name} worker exited (${signal ?? `code ${code}`})${stderr ? `: ${stderr.trim().split('\n').slice(-3).join(' | ')}` : ''}`);
      this.#pending?.reject(this.#exited);
      this.#pending = undefined;
    });
  }

  request(message: ToWorker): Promise<FromWorker> {
    if (this.#exited) return Promise.reject(this.#exited);
    return new Promise((resolve, reject) => {
      this.#pending = { resolve, reject };
      this.#child.send(message);
    });
  }

  kill(): void {
    if (!this.#exited) this.#child.kill('SIGKILL');
  }
}

interface Participant {
  spec: AllocatorSpec;
  worker?: WorkerProcess;
  faultSource?: string;
  records: RepetitionRecord[];
  error?: string;
  finished?: { peakRssBytes: number; rssStartBytes: number; pool?: PoolCounters };
}

function checkAllocators(value: unknown): AllocatorName[] {
  // Asked for by name: tensorpool-classes, the size classes beside a time-shared `plan`; tensorpool-js, the
  // same pool as tensorpool driven from JavaScript.
  if (value === undefined) return ALLOCATOR_NAMES.filter((name) => name !== 'tensorpool-classes' && name !== 'tensorpool-js');
  if (!Array.isArray(value) || value.length === 0) {
    throw invalidArgument('type', `options.allocators must be a non-empty array of ${ALLOCATOR_NAMES.join(', ')}, got ${describe(value)}`);
  }
  const names = value.map((v, i) => checkOneOf(v, `options.allocators[${i}]`, ALLOCATOR_NAMES));
  return [...new Set(names)];
}

/** Why a plan may serve this trace badly: said, not fatal (a plan may be replayed on another trace). */
function planWarnings(plan: Plan, trace: Trace): string[] {
  const warnings: string[] = [];
  const largest = plan.classes[plan.classes.length - 1].size;
  let oversize = 0;
  for (const size of trace.sizes) if (size > largest) oversize++;
  if (oversize > 0) warnings.push(`${oversize} of ${trace.bufferCount} buffers are larger than the plan's largest class (${largest} B): they go to the OS`);
  if (plan.schedule) {
    // Only the trace's own allocations can differ: a time-shared plan laid out for the trace followed by
    // its last iteration repeating (order 'time-shared-repeating') schedules that one more copy too, which
    // this replay never reaches. Allocations past the schedule's end count as differing.
    const n = Math.min(plan.schedule.sizes.length, trace.bufferCount);
    let differ = trace.bufferCount - n;
    for (let k = 0; k < n; k++) if (plan.schedule.sizes[k] !== trace.sizes[k]) differ++;
    if (differ > 0 && plan.training.iteration === 'all') {
      warnings.push(`the plan's schedule differs from this trace at ${differ} allocation(s): those are routed by class`);
    }
  }
  return warnings;
}

/**
 * Replays a trace (a Trace or a trace file's path) against tensorpool and the allocators people would pick
 * instead, each in a worker process of its own, interleaved (one repetition of each in turn, rotating the
 * order), and reports medians of the steady state (the last half of the repetitions) with their spread.
 */
export async function replay(input: Trace | string, options?: ReplayOptions): Promise<ReplayReport> {
  const o = checkOptions<ReplayOptions>(options, 'options', REPLAY_OPTIONS);
  const reps = o.reps === undefined ? 20 : checkInteger(o.reps, 'options.reps', 1, 100000);
  const touch = o.touch === undefined ? 'pages' : checkOneOf(o.touch, 'options.touch', TOUCH_MODES);
  const names = checkAllocators(o.allocators);
  if (o.onProgress !== undefined && typeof o.onProgress !== 'function') {
    throw invalidArgument('type', `options.onProgress must be a function, got ${describe(o.onProgress)}`);
  }
  if (!fs.existsSync(WORKER)) {
    throw new TensorPoolError('ERR_TP_UNSUPPORTED', `the replay worker ${WORKER} is missing: build the package (npm run build)`);
  }
  if (typeof input !== 'string' && !(input instanceof Trace)) {
    throw invalidArgument('type', `replay() takes a trace file's path or a Trace, got ${describe(input)}`);
  }
  const trace = typeof input === 'string' ? readTrace(input) : input;
  if (trace.bufferCount === 0) throw new TensorPoolError('ERR_TP_BAD_TRACE', `${trace.name}: nothing to replay: no allocations`);
  // What is live at the peak must fit: beyond it the allocators' workers are killed by the kernel's OOM
  // killer part-way (ideal's pre-faulted arena, touched blocks), after the machine swapped out the rest.
  if (trace.lowerBound() > os.totalmem()) {
    throw new TensorPoolError(
      'ERR_TP_OUT_OF_MEMORY',
      `${trace.name}: at its peak the trace holds ${trace.lowerBound()} bytes live, more than this machine's memory (${os.totalmem()} bytes): it cannot be replayed here`,
    );
  }

  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'tensorpool-replay-'));
  const participants: Participant[] = names.map((name) => ({ spec: resolveAllocator(name), records: [] }));
  try {
    const tracePath = typeof input === 'string' ? input : path.join(scratch, 'trace.csv');
    if (typeof input !== 'string') trace.writeCsv(tracePath);
    let plan: Plan | null = null;
    let planPath: string | undefined;
    if (names.includes('tensorpool')) {
      plan = o.plan === undefined ? train(trace, { order: 'auto' }) : typeof o.plan === 'string' ? Plan.read(o.plan) : o.plan;
      if (!(plan instanceof Plan)) throw invalidArgument('type', `options.plan must be a Plan or a plan file, got ${describe(o.plan)}`);
      planPath = path.join(scratch, 'plan.json');
      plan.write(planPath);
    }
    // tensorpool-classes: the same trace's size-class plan, time-shared blocks off.
    const classesPlanPath = path.join(scratch, 'classes.plan.json');
    if (names.includes('tensorpool-classes')) train(trace, { order: 'auto', share: false }).write(classesPlanPath);
    let offsetPlan: OffsetPlan | null = null;
    let offsetPlanPath: string | undefined;
    if (names.some(usesOffsetPlan)) {
      offsetPlan =
        o.offsetPlan === undefined
          ? OffsetPlan.fromTrace(trace, { strategy: 'best', timeLimitMs: 10000 })
          : typeof o.offsetPlan === 'string'
            ? OffsetPlan.read(o.offsetPlan)
            : o.offsetPlan;
      if (!(offsetPlan instanceof OffsetPlan)) {
        throw invalidArgument('type', `options.offsetPlan must be an OffsetPlan or its file, got ${describe(o.offsetPlan)}`);
      }
      checkOffsetPlanFits(offsetPlan, trace);
      offsetPlanPath = path.join(scratch, 'offsets.json');
      offsetPlan.write(offsetPlanPath);
    }

    const live = participants.filter((p) => {
      if (!isAvailable(p.spec)) p.error = missingMessage(p.spec);
      return !p.error;
    });
    await Promise.all(
      live.map(async (p) => {
        p.worker = new WorkerProcess(p.spec);
        const ready = await p.worker.request({
          type: 'init',
          tracePath,
          allocator: p.spec.kind,
          planPath:
            p.spec.name === 'tensorpool-classes' ? classesPlanPath : usesClassPlan(p.spec) ? planPath : usesOffsetPlan(p.spec.name) ? offsetPlanPath : undefined,
          touch,
          // A plan of one iteration schedules every iteration from its start. The preload library's process pool
          // is marked at the trace's own iterations, as a runtime's hook marks it.
          iterationMarks:
            p.spec.kind === 'preload' ||
            (usesClassPlan(p.spec) && typeof plan?.training.iteration === 'number') ||
            (usesOffsetPlan(p.spec.name) && typeof offsetPlan?.source.iteration === 'number'),
          mapsName: p.spec.mapsName,
        });
        if (ready.type === 'ready') p.faultSource = ready.faultSource;
      }).map((promise, i) => promise.catch((error: Error) => void (live[i].error = error.message))),
    );

    const running = () => live.filter((p) => !p.error);
    const total = reps * running().length;
    let done = 0;
    for (let round = 0; round < reps; round++) {
      const order = running();
      for (let k = 0; k < order.length; k++) {
        const p = order[(round + k) % order.length];
        try {
          const answer = await p.worker!.request({ type: 'run', timeOperations: round % 2 === 1 });
          if (answer.type === 'repetition') p.records.push(answer.record);
        } catch (error) {
          p.error = (error as Error).message;
        }
        o.onProgress?.(++done, total, p.spec.name);
      }
    }
    for (const p of running()) {
      const answer = await p.worker!.request({ type: 'finish' }).catch((error: Error) => void (p.error = error.message));
      if (answer && answer.type === 'finished') p.finished = answer;
    }

    const lowerBoundBytes = trace.lowerBound();
    const results = participants.map((p) => summarise(p, lowerBoundBytes));
    const peers = results.filter((r) => r.available && isPeer(r.allocator));
    const best = peers.reduce<AllocatorResult | null>((b, r) => (b === null || r.nsPerOp < b.nsPerOp ? r : b), null);
    for (const r of results) {
      r.vsBestPeer = best && r.available ? r.nsPerOp / best.nsPerOp : null;
      r.vsBestPeerInterval = best && r.available ? pairedTime(r, best) : null;
    }
    return {
      trace: trace.name,
      events: trace.eventCount,
      buffers: trace.bufferCount,
      reps,
      touch,
      lowerBoundBytes,
      machine: machineInfo(),
      plan: plan && {
        arenaBytes: plan.arenaBytes,
        interval: plan.interval,
        order: plan.training.order,
        source: plan.source.trace,
        warnings: planWarnings(plan, trace),
      },
      bestPeer: best?.allocator ?? null,
      offsetPlan: offsetPlan && {
        height: offsetPlan.height,
        strategy: offsetPlan.strategy,
        optimal: offsetPlan.optimal,
        source: offsetPlan.source.trace,
      },
      results,
    };
  } finally {
    for (const p of participants) p.worker?.kill();
    fs.rmSync(scratch, { recursive: true, force: true });
  }
}

function summarise(p: Participant, lowerBoundBytes: number): AllocatorResult {
  const steady = p.records.slice(Math.floor(p.records.length / 2));
  const wall = steady.filter((r) => !r.timed);
  const timed = steady.filter((r) => r.timed);
  const mean = (values: number[]) => (values.length ? values.reduce((a, b) => a + b, 0) / values.length : Number.NaN);
  const available = !p.error && p.finished !== undefined && steady.length > 0;
  const growth = p.finished ? Math.max(0, p.finished.peakRssBytes - p.finished.rssStartBytes) : Number.NaN;
  const nsPerOp = medianInterval((wall.length ? wall : steady).map((r) => r.ns / (r.allocs + r.releases)));
  const allocNs = timed.length ? medianInterval(timed.map((r) => r.allocNs / r.allocs)) : null;
  const releaseNs = timed.length ? medianInterval(timed.map((r) => r.releaseNs / r.releases)) : null;
  const faults = steady.map((r) => r.minorFaults);
  return {
    allocator: p.spec.name,
    available,
    ...(p.error && { error: p.error }),
    nsPerOp: nsPerOp.median,
    allocNs: allocNs && allocNs.median,
    releaseNs: releaseNs && releaseNs.median,
    repetitionMs: median(steady.map((r) => r.ns / 1e6)),
    corruptions: p.records.reduce((sum, r) => sum + r.corruptions, 0),
    steadyMinorFaultsPerRep: mean(steady.map((r) => r.minorFaults)),
    steadyMajorFaultsPerRep: mean(steady.map((r) => r.majorFaults)),
    peakRssBytes: p.finished?.peakRssBytes ?? Number.NaN,
    rssGrowthBytes: growth,
    lowerBoundBytes,
    rssVsLowerBound: growth / lowerBoundBytes,
    vsBestPeer: null,
    vsBestPeerInterval: null,
    spread: {
      nsPerOp,
      allocNs,
      releaseNs,
      minorFaults: { min: faults.length ? Math.min(...faults) : Number.NaN, max: faults.length ? Math.max(...faults) : Number.NaN },
    },
    faultSource: p.faultSource ?? 'none',
    pool: p.finished?.pool && perRepetition(p.finished.pool, p.records.length),
    repetitions: p.records,
  };
}

function perRepetition(counters: PoolCounters, reps: number): PoolCounters {
  const each = (v: number) => v / Math.max(1, reps);
  return {
    hits: each(counters.hits),
    borrows: each(counters.borrows),
    osFallbacks: each(counters.osFallbacks),
    osOversize: each(counters.osOversize),
    scheduleHits: each(counters.scheduleHits),
    scheduleMisses: each(counters.scheduleMisses),
    busySkips: each(counters.busySkips),
    offsetHits: each(counters.offsetHits),
    offsetMisses: each(counters.offsetMisses),
    arenaBytes: counters.arenaBytes,
    iterations: each(counters.iterations),
    ...(counters.minBytes !== undefined && { minBytes: counters.minBytes }),
  };
}

/**
 * An offset plan given to the replay must be this trace's: the same sizes in the same order, for the whole
 * trace, or (a plan of one iteration, replayed from every mark) for every iteration. Another trace's plan
 * could leave room for everything and make `ideal` a false floor; so would offsets that overlap, checked here.
 */
function checkOffsetPlanFits(plan: OffsetPlan, trace: Trace): void {
  const sameSizes = (set: Trace) => set.sizes.length === plan.sizes.length && set.sizes.every((size, i) => size === plan.sizes[i]);
  const fits =
    typeof plan.source.iteration === 'number'
      ? Array.from({ length: trace.iterations }, (_, k) => trace.iteration(k + 1)).every(sameSizes)
      : sameSizes(trace);
  const iteration = plan.source.iteration;
  if (!fits) {
    const what = typeof iteration === 'number' ? `iteration ${iteration} of ${plan.source.trace ?? 'a trace'}` : plan.source.trace ?? 'another trace';
    throw new TensorPoolError(
      'ERR_TP_BAD_PLAN',
      `the offset plan (${plan.sizes.length} buffers, planned on ${what}) does not match ${trace.name}'s allocations: plan it from this trace`,
    );
  }
  if (typeof iteration === 'number') {
    for (let k = 1; k <= trace.iterations; k++) plan.verify(trace.iteration(k));
  } else {
    plan.verify(trace);
  }
}

/**
 * `a`'s time over `b`'s, repetition by repetition (the replay runs the allocators' k-th repetitions one
 * after another), over the steady half's wall-clock repetitions: the median ratio and its 95% interval.
 * Null when either did not run or their repetitions do not pair up.
 */
export function pairedTime(a: AllocatorResult, b: AllocatorResult): MedianInterval | null {
  if (!a.available || !b.available || a.repetitions.length !== b.repetitions.length) return null;
  const from = Math.floor(a.repetitions.length / 2);
  const ratios: number[] = [];
  for (let k = from; k < a.repetitions.length; k++) {
    const [x, y] = [a.repetitions[k], b.repetitions[k]];
    if (!x.timed && !y.timed) ratios.push(x.ns / y.ns);
  }
  return ratios.length ? medianInterval(ratios) : null;
}

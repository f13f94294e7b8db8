/**
 * Training an adaptive pool's plan on a worker thread, so that the markIteration() that completed a stable
 * window returns at once instead of waiting for train() (seconds on a long recording with order 'auto').
 *
 * The pool's thread may never run its event loop between two marks (a synchronous training loop), so the
 * job is polled, not awaited: the worker raises a flag in shared memory when it has posted its result, and
 * poll() takes the message with receiveMessageOnPort(). The worker runs the compiled package
 * (dist/training-worker.js) and is unref'd: it never keeps a process alive.
 */
import fs from 'node:fs';
import path from 'node:path';
import { MessageChannel, type MessagePort, Worker, receiveMessageOnPort } from 'node:worker_threads';
import { packageRoot } from './native.js';
import { Plan } from './plan.js';
import type { PlanSpec } from './plan-spec.js';
import type { Trace, TraceParts } from './trace/trace.js';
import type { TrainOptions } from './train.js';

const WORKER = path.join(packageRoot, 'dist', 'training-worker.js');

/** What the worker is given (workerData). */
export interface TrainingJob {
  trace: TraceParts;
  options: TrainOptions;
  port: MessagePort;
  /** Int32Array over shared memory: [0] becomes 1 once the result is posted. */
  done: Int32Array;
}

/** What the worker posts: the plan's parts and how long train() took there, or why it failed. */
export type TrainingResult =
  | { spec: PlanSpec; meta: Pick<Plan, 'lowerBound' | 'source' | 'training'>; trainMs: number }
  | { error: string };

export type TrainingOutcome = { plan: Plan; trainMs: number } | { error: string };

export class BackgroundTraining {
  readonly #worker: Worker;
  readonly #port: MessagePort;
  readonly #done = new Int32Array(new SharedArrayBuffer(4));
  #exited: string | null = null;

  /**
   * Starts training `trace` (copied to the worker) with `options`; null when no worker can start here: the
   * compiled entry is missing (the sources run unbuilt), or Node refuses worker_threads (its permission
   * model without --allow-worker).
   */
  static start(trace: Trace, options: TrainOptions): BackgroundTraining | null {
    if (!fs.existsSync(WORKER)) return null;
    try {
      return new BackgroundTraining(trace, options);
    } catch {
      return null;
    }
  }

  private constructor(trace: Trace, options: TrainOptions) {
    const { port1, port2 } = new MessageChannel();
    this.#port = port1;
    const { name, format, ops, eventBuffer, eventStream, sizes, starts, ends, iterationStarts, anomalies, duration } = trace;
    const job: TrainingJob = {
      trace: { name, format, ops, eventBuffer, eventStream, sizes, starts, ends, iterationStarts: [...iterationStarts], anomalies, duration },
      options,
      port: port2,
      done: this.#done,
    };
    this.#worker = new Worker(WORKER, { workerData: job, transferList: [port2], execArgv: [], stdout: false, stderr: false });
    // Seen only when the event loop runs; a worker that posted its result never reaches these.
    this.#worker.on('error', (error) => (this.#exited ??= `the training worker failed: ${error.message}`));
    this.#worker.on('exit', (code) => (this.#exited ??= `the training worker exited with code ${code} before it finished`));
    this.#worker.unref();
  }

  /** Whether poll() has an outcome to give. */
  get settled(): boolean {
    return Atomics.load(this.#done, 0) === 1 || this.#exited !== null;
  }

  /** The outcome once the worker has finished (the plan, or why there is none); null while it trains. */
  poll(): TrainingOutcome | null {
    if (Atomics.load(this.#done, 0) === 1) {
      const result = receiveMessageOnPort(this.#port)?.message as TrainingResult | undefined;
      this.#port.close();
      if (!result) return { error: 'the training worker posted no result' };
      if ('error' in result) return result;
      return { plan: new Plan(result.spec, result.meta), trainMs: result.trainMs };
    }
    if (this.#exited !== null) return { error: this.#exited };
    return null;
  }

  /** Stops the worker if it still runs (the pool closed); its result is never looked at. */
  cancel(): void {
    this.#port.close();
    void this.#worker.terminate();
  }
}

/**
 * Training an adaptive pool's plan on a worker thread, so that the markIteration() that decided to train
 * returns at once instead of waiting for train() (seconds on a long recording with order 'auto'). The worker
 * gets the recorded events as they are and builds the trace itself: under the preload library it first
 * leaves the process pool (lib/process/training-worker.ts), so that building and training allocate none of the
 * pool's memory; the trace comes back with the plan, its buffers transferred.
 *
 * The pool's thread may never run its event loop between two marks (a synchronous training loop), so the
 * job is polled, not awaited: the worker raises a flag in shared memory when it has posted its result, and
 * poll() takes the message with receiveMessageOnPort(). A program that does run its event loop may await
 * finished() instead of polling. The worker runs the compiled package (dist/process/training-worker.js) and
 * is unref'd: it keeps a process alive only while finished() is awaited.
 */
import fs from 'node:fs';
import path from 'node:path';
import { MessageChannel, type MessagePort, Worker, receiveMessageOnPort } from 'node:worker_threads';
import { packageRoot, type NativeRecording } from '../native.js';
import { Plan } from '../plan/plan.js';
import type { PlanSpec } from '../plan/plan-spec.js';
import { Trace, type TraceParts } from '../trace/trace.js';
import type { TrainOptions } from '../plan/train.js';

const WORKER = path.join(packageRoot, 'dist', 'process', 'training-worker.js');

/** What the worker is given (workerData): the port on which its job comes, and where it says it is done. */
export interface TrainingWorkerData {
  port: MessagePort;
  /** Int32Array over shared memory: [0] becomes 1 once the result is posted. */
  done: Int32Array;
}

/** The job, the first message on the port: the recorded events, the trace's name, train()'s options. */
export interface TrainingJob {
  recording: NativeRecording;
  name: string;
  options: TrainOptions;
}

/** What the worker posts: the plan's parts, the trace it built, and how long train() took there, or why it failed. */
export type TrainingResult =
  | { spec: PlanSpec; meta: Pick<Plan, 'lowerBound' | 'source' | 'training'>; trace: TraceParts; trainMs: number }
  | { error: string };

export type TrainingOutcome = { plan: Plan; trace: Trace; trainMs: number } | { error: string };

export class BackgroundTraining {
  readonly #worker: Worker;
  readonly #port: MessagePort;
  readonly #done = new Int32Array(new SharedArrayBuffer(4));
  #exited: string | null = null;

  /**
   * Starts training on the trace of `recording` (copied to the worker), named `name`, with `options`; null
   * when no worker can start here: the compiled entry is missing (the sources run unbuilt), or Node refuses
   * worker_threads (its permission model without --allow-worker).
   */
  static start(recording: NativeRecording, name: string, options: TrainOptions): BackgroundTraining | null {
    if (!fs.existsSync(WORKER)) return null;
    try {
      return new BackgroundTraining(recording, name, options);
    } catch {
      return null;
    }
  }

  private constructor(recording: NativeRecording, name: string, options: TrainOptions) {
    const { port1, port2 } = new MessageChannel();
    this.#port = port1;
    const data: TrainingWorkerData = { port: port2, done: this.#done };
    this.#worker = new Worker(WORKER, { workerData: data, transferList: [port2], execArgv: [], stdout: false, stderr: false });
    // Read once the worker has left the process pool: copying it there allocates from the C library.
    const job: TrainingJob = { recording, name, options };
    port1.postMessage(job);
    // Seen only when the event loop runs; a worker that posted its result never reaches these.
    this.#worker.on('error', (error) => (this.#exited ??= `the training worker failed: ${error.message}`));
    this.#worker.on('exit', (code) => (this.#exited ??= `the training worker exited with code ${code} before it finished`));
    this.#worker.unref();
  }

  /** Whether poll() has an outcome to give. */
  get settled(): boolean {
    return Atomics.load(this.#done, 0) === 1 || this.#exited !== null;
  }

  /**
   * Settles once poll() has an outcome to give: when the worker has ended (after posting its result, or
   * without), at once if it has posted already. Meanwhile the worker keeps the process alive, so that a
   * program awaiting this does not end with its training unfinished.
   */
  finished(): Promise<void> {
    if (this.settled) return Promise.resolve();
    this.#worker.ref();
    return new Promise((resolve) => this.#worker.once('exit', () => resolve()));
  }

  /** The outcome once the worker has finished (the plan, or why there is none); null while it trains. */
  poll(): TrainingOutcome | null {
    if (Atomics.load(this.#done, 0) === 1) {
      const result = receiveMessageOnPort(this.#port)?.message as TrainingResult | undefined;
      this.#port.close();
      if (!result) return { error: 'the training worker posted no result' };
      if ('error' in result) return result;
      return { plan: new Plan(result.spec, result.meta), trace: new Trace(result.trace), trainMs: result.trainMs };
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

/**
 * A progress line on stderr for work that blocks the main thread (reading a large trace, a native training
 * run of seconds): a worker thread (heartbeat-worker.ts) writes it straight to the file descriptor, so it
 * appears while the main thread is busy. Nothing is written before `afterMs` (work done sooner prints
 * nothing). After that, on a terminal one line, redrawn every `tickMs` and erased by stop(); elsewhere (a
 * log) a line every `everyMs`. The stage shown is the last one stage() named.
 *
 * Where the worker cannot start (the sources run unbuilt, or Node refuses worker_threads), there is no line.
 */
import fs from 'node:fs';
import path from 'node:path';
import { MessageChannel, Worker, type MessagePort } from 'node:worker_threads';

/** Options of startHeartbeat(); every one has a default, the ones that name time are for tests. */
export interface HeartbeatOptions {
  /** What the line starts with ("tensorpool train"). */
  label: string;
  /** Where the line goes (default 2, stderr). */
  fd?: number;
  /** Whether that is a terminal (default: what process.stderr says). */
  tty?: boolean;
  /** Nothing is written before this many ms (default 3000). */
  afterMs?: number;
  /** A terminal's line is redrawn this often (default 1000 ms). */
  tickMs?: number;
  /** A log gets a line this often (default 5000 ms). */
  everyMs?: number;
}

/** What the worker is given (workerData): the options, every one set, and how to reach the main thread. */
export interface HeartbeatWorkerData extends Required<HeartbeatOptions> {
  port: MessagePort;
  /**
   * Int32Array over shared memory: stop() sets [STOP] to 1; the worker sets [WROTE] to 1 before its first
   * write (and writes only if [STOP] is still 0 then), and [STOPPED] to 1 once it has ended, its line erased.
   */
  control: Int32Array;
  /** Date.now() when the heartbeat started. */
  startedAt: number;
}

export const STOP = 0;
export const WROTE = 1;
export const STOPPED = 2;

/** A running heartbeat: stage() names what is being done, stop() ends it (its line erased from a terminal). */
export interface Heartbeat {
  stage(text: string): void;
  stop(): void;
}

/** The line: "tensorpool train: training on 412003 tensors, 14 s". */
export function heartbeatLine(label: string, stage: string, elapsedMs: number): string {
  return `${label}: ${stage || 'working'}, ${Math.floor(elapsedMs / 1000)} s`;
}

const WORKER = path.join(__dirname, 'heartbeat-worker.js');
const NONE: Heartbeat = { stage() {}, stop() {} };

export function startHeartbeat(options: HeartbeatOptions): Heartbeat {
  if (!fs.existsSync(WORKER)) return NONE;
  const { port1, port2 } = new MessageChannel();
  const control = new Int32Array(new SharedArrayBuffer(12));
  const data: HeartbeatWorkerData = {
    port: port2,
    control,
    label: options.label,
    fd: options.fd ?? 2,
    tty: options.tty ?? process.stderr.isTTY === true,
    startedAt: Date.now(),
    afterMs: options.afterMs ?? 3000,
    tickMs: options.tickMs ?? 1000,
    everyMs: options.everyMs ?? 5000,
  };
  let worker: Worker;
  try {
    worker = new Worker(WORKER, { workerData: data, transferList: [port2], execArgv: [], stdout: false, stderr: false });
  } catch {
    return NONE;
  }
  worker.unref();
  worker.on('error', () => {}); // a heartbeat that fails is no line, never the command's failure
  let stopped = false;
  return {
    stage(text) {
      if (!stopped) port1.postMessage(text);
    },
    stop() {
      if (stopped) return;
      stopped = true;
      Atomics.store(control, STOP, 1);
      Atomics.notify(control, STOP);
      // Once it has written, until the worker has ended (its line erased from a terminal): the command's own
      // output comes after it. Where it has not, it never will (it checks STOP after raising WROTE).
      if (Atomics.load(control, WROTE) === 1) Atomics.wait(control, STOPPED, 0, 1000);
      port1.close();
      void worker.terminate();
    },
  };
}

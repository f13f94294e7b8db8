/**
 * The entry of the worker thread that trains an adaptive pool's plan (lib/background-training.ts starts it):
 * trains on the job's recorded trace, posts the plan's parts (or the error) on the job's port, raises the
 * job's `done` flag so the pool's thread can see it between two marks without running its event loop, and
 * ends.
 */
import { workerData } from 'node:worker_threads';
import { Trace } from './trace/trace.js';
import { train } from './train.js';
import type { TrainingJob, TrainingResult } from './background-training.js';

const job = workerData as TrainingJob;
let result: TrainingResult;
const started = performance.now();
try {
  const plan = train(new Trace(job.trace), job.options);
  const { interval, classes, schedule, layout, lowerBound, source, training } = plan;
  result = { spec: { interval, classes, schedule, layout }, meta: { lowerBound, source, training }, trainMs: performance.now() - started };
} catch (error) {
  result = { error: error instanceof Error ? error.message : String(error) };
}
job.port.postMessage(result);
job.port.close();
Atomics.store(job.done, 0, 1);

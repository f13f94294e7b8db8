/**
 * The entry of the worker thread that trains an adaptive pool's plan (lib/background-training.ts starts it):
 * trains on the job's recorded trace, posts the plan's parts (or the error) on the job's port, raises the
 * job's `done` flag so the pool's thread can see it between two marks without running its event loop, and
 * ends. The package is loaded inside the try: a worker that cannot load it still answers.
 */
import { workerData } from 'node:worker_threads';
import type { TrainingJob, TrainingResult } from './background-training.js';

async function trainJob(job: TrainingJob): Promise<TrainingResult> {
  try {
    const [{ Trace }, { train }] = await Promise.all([import('./trace/trace.js'), import('./train.js')]);
    const started = performance.now();
    const plan = train(new Trace(job.trace), job.options);
    const { interval, classes, schedule, layout, lowerBound, source, training } = plan;
    return { spec: { interval, classes, schedule, layout }, meta: { lowerBound, source, training }, trainMs: performance.now() - started };
  } catch (error) {
    return { error: error instanceof Error ? error.message : String(error) };
  }
}

const job = workerData as TrainingJob;
void trainJob(job).then((result) => {
  job.port.postMessage(result);
  job.port.close();
  Atomics.store(job.done, 0, 1);
});

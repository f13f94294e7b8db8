/**
 * The entry of the worker thread that trains an adaptive pool's plan (lib/process/background-training.ts starts it):
 * trains on the job's recorded trace, posts the plan's parts (or the error) on the job's port, raises the
 * job's `done` flag so the pool's thread can see it between two marks without running its event loop, and
 * ends. The package is loaded inside the try: a worker that cannot load it still answers. Under the preload
 * library the worker first leaves the process pool: what training allocates comes from the C library, so it
 * neither takes the pool's memory (the default classes' growth, a plan's OS fallbacks) nor shows in the
 * iterations adaptive mode judges and records.
 */
import { receiveMessageOnPort, workerData } from 'node:worker_threads';
import type { TrainingJob, TrainingResult, TrainingWorkerData } from './background-training.js';

async function trainJob(port: TrainingWorkerData['port']): Promise<{ result: TrainingResult; transfer: ArrayBuffer[] }> {
  try {
    const { native } = await import('../native.js');
    native.leaveProcessPool();
    const job = receiveMessageOnPort(port)?.message as TrainingJob | undefined;
    if (!job) throw new Error('the training worker got no job');
    const [{ traceFromRecording }, { train }] = await Promise.all([import('../plan/recording.js'), import('../plan/train.js')]);
    const trace = traceFromRecording(job.recording, job.name);
    const started = performance.now();
    const plan = train(trace, job.options);
    const { interval, classes, schedule, layout, lowerBound, source, training } = plan;
    const { format, ops, eventBuffer, eventStream, sizes, starts, ends, iterationStarts, anomalies, duration } = trace;
    const parts = { name: job.name, format, ops, eventBuffer, eventStream, sizes, starts, ends, iterationStarts: [...iterationStarts], anomalies, duration };
    // The trace's arrays go to the pool's thread as they are (each buffer once).
    const transfer = [...new Set([ops, eventBuffer, eventStream, sizes, starts, ends].map((a) => a.buffer as ArrayBuffer))];
    const result: TrainingResult = { spec: { interval, classes, schedule, layout }, meta: { lowerBound, source, training }, trace: parts, trainMs: performance.now() - started };
    return { result, transfer };
  } catch (error) {
    return { result: { error: error instanceof Error ? error.message : String(error) }, transfer: [] };
  }
}

const data = workerData as TrainingWorkerData;
void trainJob(data.port).then(({ result, transfer }) => {
  try {
    data.port.postMessage(result, transfer);
  } catch {
    data.port.postMessage(result); // a buffer that cannot be transferred: copied instead
  }
  data.port.close();
  Atomics.store(data.done, 0, 1);
});

/**
 * A replay worker: one child process per allocator, so that each allocator (LD_PRELOADed for the peers)
 * has the process to itself and keeps its state between repetitions, as it would in a real run.
 */
import fs from 'node:fs';

import { native, type NativeReplayer } from '../native.js';
import { OffsetPlan } from '../offsets/offset-plan.js';
import { Pool, nativePoolOf } from '../pool/pool.js';
import { processPool } from '../process/process-pool.js';
import { readTrace } from '../trace/read.js';
import { JsReplayer } from './js-replayer.js';
import type { FromWorker, ToWorker, WorkerInit } from './protocol.js';


function send(message: FromWorker): void {
  process.send!(message);
}

let replayer: Pick<NativeReplayer, 'run' | 'faultSource'> | undefined;
let pool: Pool | undefined;
let rssStartBytes = 0;

function init(message: WorkerInit): void {
  if (message.mapsName && !fs.readFileSync('/proc/self/maps', 'utf8').includes(message.mapsName)) {
    throw new Error(`the allocator library (${message.mapsName}) is not loaded in the worker: LD_PRELOAD failed`);
  }
  const trace = readTrace(message.tracePath);
  // The baseline is taken before the allocator makes anything: a pool's pre-faulted arena is growth.
  rssStartBytes = native.memory(true).rss;
  if (message.allocator === 'pool' || message.allocator === 'pool-js') pool = new Pool({ plan: message.planPath });
  if (message.allocator === 'offsets') pool = new Pool({ offsets: message.planPath });
  if (message.allocator === 'pool-js') {
    replayer = new JsReplayer(pool!, trace, { touch: message.touch, iterationMarks: message.iterationMarks });
    send({ type: 'ready', faultSource: replayer.faultSource });
    return;
  }
  const ideal = message.allocator === 'ideal' && OffsetPlan.read(message.planPath!);
  const allocator = pool ? nativePoolOf(pool) : ideal ? { ideal: { height: ideal.height, sizes: ideal.sizes, offsets: ideal.offsets } } : 'libc';
  replayer = new native.NativeReplayer(allocator, trace.ops, trace.eventBuffer, trace.sizes, {
    touch: message.touch,
    iterationMarks: message.iterationMarks,
  });
  send({ type: 'ready', faultSource: replayer.faultSource });
}

function handle(message: ToWorker): void {
  if (message.type === 'init') {
    init(message);
  } else if (message.type === 'run') {
    const r = replayer!.run(message.timeOperations);
    send({ type: 'repetition', record: { ...r, timed: message.timeOperations } });
  } else {
    const memory = native.memory(false);
    // The preload route's malloc calls were served by the process pool: its counters (the whole worker's).
    const processAllocator = pool ? null : processPool();
    const s = pool?.stats() ?? processAllocator?.stats();
    send({
      type: 'finished',
      peakRssBytes: memory.peakRss,
      rssStartBytes,
      pool: s && {
        hits: s.hits,
        borrows: s.borrows,
        osFallbacks: s.osFallbacks,
        osOversize: s.osOversize,
        scheduleHits: s.scheduleHits,
        scheduleMisses: s.scheduleMisses,
        busySkips: 'busySkips' in s ? s.busySkips : 0,
        offsetHits: s.offsetHits,
        offsetMisses: s.offsetMisses,
        arenaBytes: s.arenaBytes,
        iterations: s.iterations,
        ...(processAllocator && { minBytes: processAllocator.minBytes }),
      },
    });
    process.disconnect();
  }
}

process.on('message', (message: ToWorker) => {
  try {
    handle(message);
  } catch (error) {
    send({ type: 'error', message: (error as Error).message });
    process.disconnect();
  }
});

/**
 * The worker thread of a heartbeat (heartbeat.ts): sleeps on the shared control word, reads the stage the
 * main thread last named without its event loop (receiveMessageOnPort), and writes the line with a direct
 * write to the descriptor, so that none of it needs the main thread, which is busy.
 */
import fs from 'node:fs';
import { receiveMessageOnPort, workerData } from 'node:worker_threads';

import { heartbeatLine, STOP, STOPPED, WROTE, type HeartbeatWorkerData } from './heartbeat.js';

const d = workerData as HeartbeatWorkerData;
let stage = '';
let shown = false; // a terminal line is on screen
let lastLine = -Infinity; // when a log last got a line
try {
  while (Atomics.wait(d.control, STOP, 0, d.tickMs) === 'timed-out') {
    for (let m = receiveMessageOnPort(d.port); m; m = receiveMessageOnPort(d.port)) stage = String(m.message);
    const elapsed = Date.now() - d.startedAt;
    if (elapsed < d.afterMs || (!d.tty && elapsed - lastLine < d.everyMs)) continue;
    // Raised before the write, STOP read after: stop() either sees WROTE and waits, or this sees STOP.
    Atomics.store(d.control, WROTE, 1);
    if (Atomics.load(d.control, STOP) === 1) break;
    if (d.tty) {
      fs.writeSync(d.fd, `\r${heartbeatLine(d.label, stage, elapsed)}\x1b[K`);
      shown = true;
    } else {
      fs.writeSync(d.fd, `${heartbeatLine(d.label, stage, elapsed)}\n`);
      lastLine = elapsed;
    }
  }
  if (shown) fs.writeSync(d.fd, '\r\x1b[K');
} catch {
  // A descriptor that cannot be written: no line, and the command goes on.
} finally {
  Atomics.store(d.control, STOPPED, 1);
  Atomics.notify(d.control, STOPPED);
}

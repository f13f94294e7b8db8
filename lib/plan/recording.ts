/**
 * Recorded events → Trace. The pool records natively (native/core/recorder.h): per event the allocation's serial
 * number, which names the buffer, and its size or the stream of a stream-ordered release. This turns them
 * into the trace model train() and replay() take, in tensorpool's time (the event index).
 */
import type { NativeRecording } from '../native.js';
import { noAnomalies, TraceBuilder, type Trace } from '../trace/trace.js';

const RecordedOp = { Alloc: 0, Release: 1, Mark: 2 } as const;

/** Events a recording holds at most by default (16 bytes each): 64 MiB. */
export const DEFAULT_RECORD_EVENTS = 4 * 2 ** 20;

/**
 * A release of a block allocated before the recording began is dropped and counted as `freeOfUnknown`;
 * blocks still live at the end count as never freed. An allocation's stream is the thread that made it (0
 * for the process's main thread, then 1, 2, … in the order threads first allocated while recording); a
 * release's is 0 for a plain release, else 1, 2, … in the order streams were first used by a stream-ordered
 * release.
 */
export function traceFromRecording(recording: NativeRecording, name: string): Trace {
  const builder = new TraceBuilder();
  const anomalies = noAnomalies();
  const buffers = new Map<number, number>(); // serial -> buffer index
  const { ops, serials, values, threads } = recording;
  for (let e = 0; e < ops.length; e++) {
    switch (ops[e]) {
      case RecordedOp.Alloc:
        buffers.set(serials[e], builder.alloc(values[e], threads[e]));
        break;
      case RecordedOp.Release: {
        const buffer = buffers.get(serials[e]);
        if (buffer === undefined) {
          anomalies.freeOfUnknown++;
        } else {
          builder.free(buffer, values[e]);
          buffers.delete(serials[e]);
        }
        break;
      }
      default:
        builder.mark();
    }
  }
  return builder.build(name, 'recorded', anomalies);
}

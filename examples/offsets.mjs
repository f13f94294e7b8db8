// Static offset planning: place every buffer of a problem at a fixed offset, checked by the verifier; then
// a pool in offsets mode serving a trace's second iteration at planned offsets. Run: node examples/offsets.mjs
import { EventOp, OffsetPlan, Pool, planOffsets, readProblem, readTrace } from 'tensorpool';

const problem = readProblem('test/fixtures/minimalloc/A.1048576.csv'); // MiniMalloc CSV, or any trace's buffers
const layout = planOffsets(problem, { strategy: 'best', timeLimitMs: 2000 });
console.log(`best: height ${layout.peak}, lower bound ${layout.lowerBound}, valid ${layout.valid}`);

const step = readTrace('traces/transformer_train.csv.gz').iteration(2);
const pool = new Pool({ offsets: OffsetPlan.fromTrace(step) });
const live = new Map(); // buffer number -> its ArrayBuffer
pool.markIteration();
for (let e = 0; e < step.eventCount; e++) {
  const buffer = step.eventBuffer[e];
  if (step.ops[e] === EventOp.Alloc) live.set(buffer, pool.alloc(step.sizes[buffer]));
  else if (step.ops[e] === EventOp.Free) {
    pool.release(live.get(buffer));
    live.delete(buffer);
  }
}
const s = pool.stats();
console.log(`offsets mode: ${s.offsetHits} of ${s.allocs} allocations at their planned offset, ${s.osFallbacks} from the OS`);
for (const buffer of live.values()) pool.release(buffer);
pool.close();

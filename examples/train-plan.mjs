// Train a plan from a trace and serve it: the bundled resnet18 training-step trace, replayed through a pool
// built from its plan. Run: node examples/train-plan.mjs
import { EventOp, Pool, readTrace, train } from 'tensorpool';

const trace = readTrace('traces/resnet18_train.csv.gz'); // tensorpool CSV, torch.profiler JSON or MiniMalloc CSV
const plan = train(trace, { order: 'auto' });
console.log(`lower bound ${trace.lowerBound()} bytes; plan ${plan.arenaBytes} (${(plan.arenaBytes / trace.lowerBound()).toFixed(3)}x)`);
// plan.write('resnet18.plan.json') keeps it: new Pool({ plan: 'resnet18.plan.json' }), or tensorpool run --plan

const pool = new Pool({ plan });
const live = new Map(); // buffer number -> its ArrayBuffer
for (let e = 0; e < trace.eventCount; e++) {
  const buffer = trace.eventBuffer[e];
  if (trace.ops[e] === EventOp.Iteration) pool.markIteration();
  else if (trace.ops[e] === EventOp.Alloc) live.set(buffer, pool.alloc(trace.sizes[buffer]));
  else {
    pool.release(live.get(buffer));
    live.delete(buffer);
  }
}
const s = pool.stats();
console.log(`${s.allocs} allocations: ${s.scheduleHits} where the plan scheduled them, ${s.osFallbacks} from the OS`);
pool.close();

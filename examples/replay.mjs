// Replay a trace against allocators, each in a worker process of its own: time per operation, page faults
// per repetition, RSS against the trace's lower bound. Run: node examples/replay.mjs
import { replay } from 'tensorpool';

const report = await replay('traces/transformer_train.csv.gz', { allocators: ['tensorpool', 'malloc', 'ideal'], reps: 6 });
for (const r of report.results) {
  if (!r.available) console.log(`${r.allocator}: ${r.error}`);
  else console.log(`${r.allocator}: ${Math.round(r.nsPerOp)} ns/op, ${Math.round(r.steadyMinorFaultsPerRep)} faults/rep, RSS ${r.rssVsLowerBound.toFixed(2)}x the lower bound`);
}

/**
 * Tensor allocation cost: alloc + one write per 4 KiB page + release, for 64 B to 64 MiB tensors, from a
 * prefaulted tensorpool Pool vs `new Float32Array(n)` vs `Buffer.allocUnsafe(n)`. Variants run interleaved
 * (every repetition runs each variant once, in rotating order); the table shows medians over repetitions.
 *
 * 'tensorpool' has its front cache where Node.js has `ArrayBuffer.prototype.transfer` (>= 22): a block
 * released and allocated again at the same length never crosses into native code. 'tensorpool, no front
 * cache' is the same pool without it: every alloc makes an external ArrayBuffer through N-API, every
 * release detaches it (what Node 20 always does). 'tensorpool, dormant handle' has a cache that keeps no
 * block: each release gives the block back to the pool and keeps its handle, which the next alloc of the
 * same block and length gets back (one N-API call per alloc, none per release; on Node < 22 as 'no front
 * cache'). 'tensorpool, native loop' is the pool driven by the
 * native replay loop (no JS, no ArrayBuffer per block): what the pool itself costs.
 *
 *   npm run build && npx tsx bench/alloc.ts [--reps 15] [--json out.json]
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { Pool, measureFaults } from '../dist/index.js';
import { native, type NativeReplayer } from '../dist/native.js';
import { nativePoolOf } from '../dist/pool/pool.js';
import { formatBytes, formatTable, round } from '../dist/report/table.js';
import { median } from '../dist/report/stats.js';
import { benchArgs, printHeader, writeJson } from './harness.js';

// Every timed batch starts from a collected heap, so that no variant pays for the garbage of the one before
// it (a batch of `new Float32Array` leaves megabytes of dead buffers that the next batch's scavenges would
// sweep), and after a 20 ms pause, so that the collector's concurrent sweeping is done before the clock
// starts. Each variant's own garbage is collected inside its own batch, which is long enough for that (tens
// of ms and more; with short batches one variant's debts decided another's median: 4 KiB through the front
// cache measured 410-530 ns in the bench and 230 ns alone, the same day).
setFlagsFromString('--expose-gc');
const collectGarbage = runInNewContext('gc') as () => void;
const pause = new Int32Array(new SharedArrayBuffer(4));

const KiB = 1024;
const MiB = 1024 * KiB;
const SIZES = [64, KiB, 4 * KiB, 64 * KiB, MiB, 16 * MiB, 64 * MiB];
// Operations per timed batch: enough that a batch of the pool's takes tens of milliseconds.
const OPS: Record<number, number> = { 64: 200000, [KiB]: 200000, [4 * KiB]: 100000, [64 * KiB]: 20000, [MiB]: 500, [16 * MiB]: 40, [64 * MiB]: 12 };

function touchPages(x: Float32Array): void {
  for (let i = 0; i < x.length; i += 1024) x[i] = i;
}

/** alloc + touch + release through the JS API of `p`. */
function throughJs(p: Pool): Variant['run'] {
  return (bytes, ops) => {
    for (let i = 0; i < ops; i++) {
      const x = p.float32(bytes / 4);
      touchPages(x);
      p.release(x);
    }
  };
}

type Variant = { name: string; run: (bytes: number, ops: number) => void };

const args = benchArgs(15);
const machine = printHeader('alloc: alloc + one write per 4 KiB page + release');
const plan = { interval: 64, classes: SIZES.map((size) => ({ size, blocks: 1 })) };
const pool = new Pool({ plan });
const uncached = new Pool({ plan, frontCache: false });
// A cache that keeps no block: every release goes back to the pool, its handle dormant (what a block the
// cache may not keep costs: a time-shared block whose memory another block takes first, a lent block).
const dormant = new Pool({ plan, frontCache: { maxPerSize: 0 } });
// Its own pool: a block the JS variant's front cache holds is not there for a native caller.
const looped = new Pool({ plan, frontCache: false });

/** A native replayer of `ops` alloc + release pairs of `bytes` through the pool, one per size. */
const loops = new Map<string, NativeReplayer>();
function nativeLoop(bytes: number, ops: number): NativeReplayer {
  const id = `${bytes}x${ops}`;
  let loop = loops.get(id);
  if (!loop) {
    const opsArray = new Uint8Array(2 * ops);
    const buffers = new Int32Array(2 * ops);
    for (let i = 0; i < ops; i++) {
      opsArray[2 * i + 1] = 1;
      buffers[2 * i] = buffers[2 * i + 1] = i;
    }
    loop = new native.NativeReplayer(nativePoolOf(looped), opsArray, buffers, new Float64Array(ops).fill(bytes), {
      touch: 'pages',
      iterationMarks: false,
    });
    loops.set(id, loop);
  }
  return loop;
}

const variants: Variant[] = [
  { name: 'tensorpool', run: throughJs(pool) },
  { name: 'tensorpool, dormant handle', run: throughJs(dormant) },
  { name: 'tensorpool, no front cache', run: throughJs(uncached) },
  {
    name: 'tensorpool, native loop',
    run: (bytes, ops) => void nativeLoop(bytes, ops).run(false),
  },
  {
    name: 'new Float32Array',
    run: (bytes, ops) => {
      for (let i = 0; i < ops; i++) touchPages(new Float32Array(bytes / 4));
    },
  },
  {
    name: 'Buffer.allocUnsafe',
    run: (bytes, ops) => {
      for (let i = 0; i < ops; i++) {
        const b = Buffer.allocUnsafe(bytes);
        touchPages(new Float32Array(b.buffer, b.byteOffset, bytes / 4));
      }
    },
  },
];

interface Sample {
  ns: number[];
  faults: number[];
}
const samples = new Map<string, Sample>();
const key = (variant: string, bytes: number) => `${variant}@${bytes}`;

for (const bytes of SIZES) {
  const ops = args.quick ? Math.max(2, Math.ceil(OPS[bytes] / 10)) : OPS[bytes];
  for (const v of variants) v.run(bytes, Math.max(1, ops >> 2)); // warm-up
  for (let rep = 0; rep < args.reps; rep++) {
    for (let k = 0; k < variants.length; k++) {
      const v = variants[(rep + k) % variants.length];
      collectGarbage();
      Atomics.wait(pause, 0, 0, 20);
      const start = process.hrtime.bigint();
      const measured = measureFaults(() => v.run(bytes, ops));
      const ns = Number(process.hrtime.bigint() - start) / ops;
      const s = samples.get(key(v.name, bytes)) ?? { ns: [], faults: [] };
      s.ns.push(ns);
      s.faults.push(measured.minor / ops);
      samples.set(key(v.name, bytes), s);
    }
  }
}

const rows = [];
const results = [];
for (const bytes of SIZES) {
  const poolNs = median(samples.get(key('tensorpool', bytes))!.ns);
  const float32Ns = median(samples.get(key('new Float32Array', bytes))!.ns);
  for (const v of variants) {
    const s = samples.get(key(v.name, bytes))!;
    const ns = median(s.ns);
    const faults = median(s.faults);
    rows.push([formatBytes(bytes), v.name, round(ns, 0), round(faults, 1), round(ns / poolNs, 2), round(ns / float32Ns, 2)]);
    results.push({ bytes, variant: v.name, nsPerOp: ns, minorFaultsPerOp: faults, vsTensorpool: ns / poolNs, vsFloat32Array: ns / float32Ns });
  }
}
console.log(`# front cache: ${pool.stats().frontCache ? 'on' : 'not available in this Node.js (needs ArrayBuffer.prototype.transfer, Node >= 22)'}`);
console.log(formatTable(['size', 'variant', 'ns/op (median)', 'minor faults/op', 'x tensorpool', 'x new Float32Array'], rows));
console.log(`# ${args.reps} repetitions, interleaved; fault counts from ${measureFaults(() => 0).source}`);
writeJson(args.json, { benchmark: 'alloc', machine, reps: args.reps, results });

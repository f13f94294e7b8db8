/**
 * Streams and the event pool (S4):
 *  1. cost of a stream-ordered release + its reclaim (the next alloc), with the event pool and with an
 *     event made and destroyed every time, interleaved;
 *  2. throughput of a producer / consumer loop over two streams: the producer fills a buffer, the consumer
 *     waits for the producer's event, accumulates it with axpy, and releases it stream-ordered.
 *
 *   npm run build && npx tsx bench/streams.ts [--reps 9] [--json out.json]
 */
import { Pool, Stream } from '../dist/index.js';
import { nativePoolOf } from '../dist/pool/pool.js';
import { formatTable, round } from '../dist/report/table.js';
import { median } from '../dist/report/stats.js';
import { benchArgs, printHeader, writeJson } from './harness.js';

async function main(): Promise<void> {
  const args = benchArgs(9);
  const machine = printHeader('streams: stream-ordered release, event pool, producer/consumer');
  const ops = args.quick ? 20_000 : 200_000;

  // 1. Deferred release + reclaim: the stream is idle, so each event has passed by the next alloc.
  const pool = new Pool({ plan: { interval: 4096, classes: [{ size: 4096, blocks: 16 }] } });
  const stream = new Stream();
  const time = (pooling: boolean) => {
    nativePoolOf(pool).setEventPooling(pooling);
    const before = pool.stats();
    const start = process.hrtime.bigint();
    for (let i = 0; i < ops; i++) pool.release(pool.uint8(4096), { stream });
    const ns = Number(process.hrtime.bigint() - start) / ops;
    const after = pool.stats();
    return { ns, created: after.eventsCreated - before.eventsCreated, reused: after.eventsReused - before.eventsReused };
  };
  const plain = () => {
    const start = process.hrtime.bigint();
    for (let i = 0; i < ops; i++) pool.release(pool.uint8(4096));
    return Number(process.hrtime.bigint() - start) / ops;
  };
  time(true);
  time(false);
  const samples = { pooled: [] as number[], unpooled: [] as number[], plain: [] as number[] };
  let counts = { pooled: { created: 0, reused: 0 }, unpooled: { created: 0, reused: 0 } };
  for (let rep = 0; rep < args.reps; rep++) {
    const order = rep % 2 ? (['unpooled', 'pooled'] as const) : (['pooled', 'unpooled'] as const);
    for (const mode of order) {
      const r = time(mode === 'pooled');
      samples[mode].push(r.ns);
      counts = { ...counts, [mode]: { created: r.created, reused: r.reused } };
    }
    samples.plain.push(plain());
  }
  const rows = [
    ['release + reclaim, event pool', round(median(samples.pooled), 0), counts.pooled.created, counts.pooled.reused],
    ['release + reclaim, new event each time', round(median(samples.unpooled), 0), counts.unpooled.created, counts.unpooled.reused],
    ['plain release (no stream), for scale', round(median(samples.plain), 0), null, null],
  ];
  console.log(`\n## stream-ordered release of a 4 KiB block + the alloc that reclaims it (${ops} per repetition)`);
  console.log(formatTable(['variant', 'ns/op (median)', 'events created', 'events reused'], rows));
  await stream.close();
  pool.close();

  // 2. Producer / consumer over two streams.
  const elements = 256 * 1024; // 1 MiB of Float32
  const buffers = args.quick ? 200 : 2000;
  const pc = new Pool({ plan: { interval: 4096, classes: [{ size: elements * 4, blocks: 8 }] } });
  const producer = new Stream();
  const consumer = new Stream();
  const sum = pc.float32(elements);
  consumer.fill(sum, 0);
  const runs: number[] = [];
  for (let rep = 0; rep < Math.max(3, Math.floor(args.reps / 3)); rep++) {
    const start = process.hrtime.bigint();
    for (let i = 0; i < buffers; i++) {
      const b = pc.float32(elements);
      producer.fill(b, 1);
      consumer.track(producer.record().synchronize()); // the consumer waits for the producer's work
      consumer.axpy(1, b, sum);
      pc.release(b, { stream: consumer }); // reused only after the consumer has read it
      if (pc.stats().deferredPending > 4) await consumer.record().synchronize(); // bounded in flight
    }
    await consumer.synchronize();
    runs.push(Number(process.hrtime.bigint() - start) / 1e9);
  }
  const seconds = median(runs);
  const s = pc.stats();
  console.log(`\n## producer / consumer over two streams: ${buffers} buffers of 1 MiB per run, at most 4 in flight`);
  console.log(formatTable(['buffers/s', 'MiB/s', 'events created', 'events reused', 'check: sum[0]'], [[round(buffers / seconds, 0), round(buffers / seconds, 0), s.eventsCreated, s.eventsReused, sum[0]]]));
  await producer.close();
  await consumer.close();
  writeJson(args.json, { benchmark: 'streams', machine, ops, releaseNs: samples, producerConsumer: { buffers, seconds: runs } });
}

void main();

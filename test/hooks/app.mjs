// The ESM form of a plain onnxruntime-node app (no tensorpool): argv model file, runs, batch.
import * as ort from 'onnxruntime-node';

const [model, runs, batch] = process.argv.slice(2);
const session = await ort.InferenceSession.create(model, { intraOpNumThreads: 1 });
const n = Number(batch);
const sums = [];
for (let r = 0; r < Number(runs); r++) {
  const values = new Float32Array(n * 8 * 32 * 32);
  for (let i = 0; i < values.length; i++) values[i] = ((i * 7919) % 1009) / 1009 - 0.5;
  const { y } = await session.run({ x: new ort.Tensor('float32', values, [n, 8, 32, 32]) });
  sums.push(y.data.reduce((a, b) => a + b, 0));
}
await session.release();
console.log(JSON.stringify({ sums }));

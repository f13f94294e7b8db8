// The app of bench/node-hook.ts: greedy generation with bench/decoder-model.ts's decoder, one session.run()
// per token, each run's key/value cache fed to the next. It knows nothing of tensorpool (the bench starts it
// under `tensorpool run`'s environment or without). Environment: DECODER_MODEL (the .onnx file),
// DECODER_GENERATIONS (measured generations, after one unmeasured), DECODER_TOKENS (runs a generation: a
// prompt of 8 tokens, then one token a run), DECODER_ARENA=0 (the app turns ONNX Runtime's arena and memory
// pattern off itself, as the Node hook would), DECODER_WIDTH (the model's width). Prints one JSON line: the measured runs, their CPU time
// (process.cpuUsage, user + system, microseconds) and a checksum of the tokens generated.
const ort = require('onnxruntime-node');

const PROMPT = 8;

async function main() {
  const generations = Number(process.env.DECODER_GENERATIONS ?? 10);
  const tokens = Number(process.env.DECODER_TOKENS ?? 32);
  const options = { intraOpNumThreads: 1, interOpNumThreads: 1, executionMode: 'sequential' };
  if (process.env.DECODER_ARENA === '0') Object.assign(options, { enableCpuMemArena: false, enableMemPattern: false });
  const session = await ort.InferenceSession.create(process.env.DECODER_MODEL, options);
  const layers = session.inputNames.filter((name) => name.startsWith('past_key_')).length;
  const width = Number(process.env.DECODER_WIDTH ?? 512);
  let checksum = 0;

  async function generate(seed) {
    let ids = BigInt64Array.from({ length: PROMPT }, (_, i) => BigInt((seed * 31 + i * 7) % 8192));
    const past = {};
    for (let l = 0; l < layers; l++) {
      past[`past_key_${l}`] = new ort.Tensor('float32', new Float32Array(0), [1, 0, width]);
      past[`past_value_${l}`] = new ort.Tensor('float32', new Float32Array(0), [1, 0, width]);
    }
    for (let t = 0; t < tokens; t++) {
      const out = await session.run({ input_ids: new ort.Tensor('int64', ids, [1, ids.length]), ...past });
      for (let l = 0; l < layers; l++) {
        past[`past_key_${l}`] = out[`present_key_${l}`];
        past[`past_value_${l}`] = out[`present_value_${l}`];
      }
      const logits = out.logits.data;
      const vocabulary = out.logits.dims[2];
      const last = logits.length - vocabulary;
      let best = 0;
      for (let i = 1; i < vocabulary; i++) if (logits[last + i] > logits[last + best]) best = i;
      checksum = (checksum * 33 + best) % 1000000007;
      ids = BigInt64Array.of(BigInt(best));
    }
  }

  await generate(0);
  const before = process.cpuUsage();
  for (let g = 1; g <= generations; g++) await generate(g);
  const cpu = process.cpuUsage(before);
  process.stdout.write(`${JSON.stringify({ runs: generations * tokens, cpuMicros: cpu.user + cpu.system, checksum })}\n`);
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});

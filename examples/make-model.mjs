// Builds examples/model.onnx, the small image model the examples run (committed; run this to rebuild it):
// input 'x' float[batch, 3, height, width] -> two 3x3 convolutions with ReLU -> global average pool ->
// a 16 x 10 matrix product -> output 'y' float[batch, 10]. Any batch, height and width: a cycle of input
// shapes is a cycle of activation sizes, as in a real vision service. Weights are fixed pseudo-random
// numbers, so every build is the same file.
//
//   node examples/make-model.mjs [--help] [OUT]   (default OUT: examples/model.onnx; needs the dev
//                                                   dependency onnx-proto)
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import onnxProto from 'onnx-proto';

const { onnx } = onnxProto;
const FLOAT = onnx.TensorProto.DataType.FLOAT;

export function smallImageModel() {
  const weights = (name, dims, seed) => {
    const data = [];
    let x = seed;
    for (let i = 0; i < dims.reduce((a, b) => a * b, 1); i++) {
      x = (x * 1103515245 + 12345) % 2 ** 31;
      data.push((x / 2 ** 31 - 0.5) / 4);
    }
    return { name, dims, dataType: FLOAT, floatData: data };
  };
  const tensorType = (dims) => ({
    tensorType: { elemType: FLOAT, shape: { dim: dims.map((d) => (typeof d === 'string' ? { dimParam: d } : { dimValue: d })) } },
  });
  const pads = { name: 'pads', type: onnx.AttributeProto.AttributeType.INTS, ints: [1, 1, 1, 1] };
  const graph = {
    name: 'tensorpool-example',
    input: [{ name: 'x', type: tensorType(['batch', 3, 'height', 'width']) }],
    output: [{ name: 'y', type: tensorType(['batch', 10]) }],
    initializer: [weights('w1', [16, 3, 3, 3], 1), weights('b1', [16], 2), weights('w2', [16, 16, 3, 3], 3), weights('b2', [16], 4), weights('m', [16, 10], 5)],
    node: [
      { opType: 'Conv', input: ['x', 'w1', 'b1'], output: ['c1'], attribute: [pads] },
      { opType: 'Relu', input: ['c1'], output: ['r1'] },
      { opType: 'Conv', input: ['r1', 'w2', 'b2'], output: ['c2'], attribute: [pads] },
      { opType: 'Relu', input: ['c2'], output: ['r2'] },
      { opType: 'GlobalAveragePool', input: ['r2'], output: ['g'] },
      { opType: 'Flatten', input: ['g'], output: ['f'] },
      { opType: 'MatMul', input: ['f', 'm'], output: ['y'] },
    ],
  };
  const model = { irVersion: 8, opsetImport: [{ domain: '', version: 13 }], producerName: 'tensorpool examples', graph };
  return onnx.ModelProto.encode(onnx.ModelProto.create(model)).finish();
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2);
  if (args.includes('--help')) {
    console.log('usage: node examples/make-model.mjs [OUT]\n\nWrites the examples\' small ONNX model (default: examples/model.onnx).');
  } else if (args.length > 1 || args.some((a) => a.startsWith('-'))) {
    console.error('usage: node examples/make-model.mjs [--help] [OUT]');
    process.exitCode = 2;
  } else {
    const out = args[0] ?? path.join(path.dirname(fileURLToPath(import.meta.url)), 'model.onnx');
    const bytes = smallImageModel();
    fs.writeFileSync(out, bytes);
    console.log(`wrote ${out} (${bytes.length} bytes)`);
  }
}

/**
 * A small ONNX model built in the test (onnx-proto): a 3x3 convolution, a ReLU, a reshape and a matrix
 * product, with a dynamic batch dimension. Weights are fixed pseudo-random numbers, so runs are comparable.
 */
import { onnx } from 'onnx-proto';

export const CHANNELS = 8;
export const SIDE = 32;
export const FILTERS = 16;
export const CLASSES = 10;

function weights(count: number, seed: number): number[] {
  const out: number[] = [];
  let x = seed;
  for (let i = 0; i < count; i++) {
    x = (x * 1103515245 + 12345) % 2 ** 31;
    out.push((x / 2 ** 31 - 0.5) / 8);
  }
  return out;
}

function floatTensor(name: string, dims: number[], seed: number): onnx.ITensorProto {
  return { name, dims, dataType: onnx.TensorProto.DataType.FLOAT, floatData: weights(dims.reduce((a, b) => a * b, 1), seed) };
}

function valueInfo(name: string, dims: (number | string)[], elemType = onnx.TensorProto.DataType.FLOAT): onnx.IValueInfoProto {
  return {
    name,
    type: {
      tensorType: {
        elemType,
        shape: { dim: dims.map((d) => (typeof d === 'string' ? { dimParam: d } : { dimValue: d })) },
      },
    },
  };
}

/** input 'x' float[batch, CHANNELS, SIDE, SIDE] -> output 'y' float[batch, CLASSES] */
export function smallModel(): Uint8Array {
  const features = FILTERS * SIDE * SIDE;
  const graph: onnx.IGraphProto = {
    name: 'tensorpool-test',
    input: [valueInfo('x', ['batch', CHANNELS, SIDE, SIDE])],
    output: [valueInfo('y', ['batch', CLASSES])],
    initializer: [
      floatTensor('w', [FILTERS, CHANNELS, 3, 3], 1),
      floatTensor('b', [FILTERS], 2),
      floatTensor('m', [features, CLASSES], 3),
      { name: 'shape', dims: [2], dataType: onnx.TensorProto.DataType.INT64, int64Data: [-1, features] },
    ],
    node: [
      {
        opType: 'Conv',
        input: ['x', 'w', 'b'],
        output: ['c'],
        attribute: [{ name: 'pads', type: onnx.AttributeProto.AttributeType.INTS, ints: [1, 1, 1, 1] }],
      },
      { opType: 'Relu', input: ['c'], output: ['r'] },
      { opType: 'Reshape', input: ['r', 'shape'], output: ['f'] },
      { opType: 'MatMul', input: ['f', 'm'], output: ['y'] },
    ],
  };
  const model: onnx.IModelProto = { irVersion: 8, opsetImport: [{ domain: '', version: 13 }], producerName: 'tensorpool tests', graph };
  return onnx.ModelProto.encode(onnx.ModelProto.create(model)).finish();
}

/**
 * An output whose shape depends on the input's data, not only on its shape: input 'x' float[n] -> output
 * 'where' int64[1, k], the indices of x's non-zero elements (NonZero).
 */
export function nonZeroModel(): Uint8Array {
  const graph: onnx.IGraphProto = {
    name: 'tensorpool-test-nonzero',
    input: [valueInfo('x', ['n'])],
    output: [valueInfo('where', [1, 'k'], onnx.TensorProto.DataType.INT64)],
    node: [{ opType: 'NonZero', input: ['x'], output: ['where'] }],
  };
  const model: onnx.IModelProto = { irVersion: 8, opsetImport: [{ domain: '', version: 13 }], producerName: 'tensorpool tests', graph };
  return onnx.ModelProto.encode(onnx.ModelProto.create(model)).finish();
}

/** Input values for a batch: fixed, different per element. */
export function inputValues(batch: number): Float32Array {
  const values = new Float32Array(batch * CHANNELS * SIDE * SIDE);
  for (let i = 0; i < values.length; i++) values[i] = ((i * 7919) % 1009) / 1009 - 0.5;
  return values;
}

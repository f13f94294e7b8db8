/**
 * Building the benches' ONNX models with onnx-proto (./encoder-model.ts, ./decoder-model.ts): initializers
 * of seeded random weights (a linear congruential generator: the same model every time), nodes, and the
 * model's encoding (IR 8, opset 17).
 */
import { onnx } from 'onnx-proto';

/** `count` floats uniform in [-scale/2, scale/2), from `seed`. */
export function weights(count: number, seed: number, scale: number): Float32Array {
  const out = new Float32Array(count);
  let x = seed >>> 0;
  for (let i = 0; i < count; i++) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    out[i] = (x / 2 ** 32 - 0.5) * scale;
  }
  return out;
}

/** A graph's initializers and nodes as they are added; each adder returns the name of what it made. */
export interface GraphBuilder {
  initializer: onnx.ITensorProto[];
  node: onnx.INodeProto[];
  /** Random weights (weights(), each tensor its own seed), stored raw (little-endian floats). */
  tensor(name: string, dims: number[], scale: number): string;
  /** Given float values. */
  constant(name: string, dims: number[], values: number[]): string;
  op(opType: string, input: string[], output: string, attribute?: onnx.IAttributeProto[]): string;
}

export function graphBuilder(): GraphBuilder {
  const FLOAT = onnx.TensorProto.DataType.FLOAT;
  const initializer: onnx.ITensorProto[] = [];
  const node: onnx.INodeProto[] = [];
  let seed = 1;
  return {
    initializer,
    node,
    tensor(name, dims, scale) {
      const values = weights(dims.reduce((a, b) => a * b, 1), seed++, scale);
      initializer.push({ name, dims, dataType: FLOAT, rawData: new Uint8Array(values.buffer) });
      return name;
    },
    constant(name, dims, values) {
      initializer.push({ name, dims, dataType: FLOAT, floatData: values });
      return name;
    },
    op(opType, input, output, attribute = []) {
      node.push({ opType, input, output: [output], attribute });
      return output;
    },
  };
}

/** A tensor type's shape: numbers are fixed dimensions, strings named (dynamic) ones. */
export function tensorShape(dims: (number | string)[]): onnx.ITensorShapeProto {
  return { dim: dims.map((x) => (typeof x === 'string' ? { dimParam: x } : { dimValue: x })) };
}

/** The model of graph `name` with these inputs, outputs and the builder's initializers and nodes, encoded. */
export function encodeModel(name: string, input: onnx.IValueInfoProto[], output: onnx.IValueInfoProto[], graph: GraphBuilder): Uint8Array {
  const model: onnx.IModelProto = {
    irVersion: 8,
    opsetImport: [{ domain: '', version: 17 }],
    producerName: 'tensorpool benches',
    graph: { name, input, output, initializer: graph.initializer, node: graph.node },
  };
  return onnx.ModelProto.encode(onnx.ModelProto.create(model)).finish();
}

/**
 * A small BERT-like text encoder for the benches, built with onnx-proto (random weights, fixed seed): token
 * ids int64 [batch, sequence] -> an embedding Gather, then `layers` blocks of single-head self-attention
 * (Q, K, V and output MatMuls, a scaled Softmax over the sequence) and a ReLU feed-forward, each with a
 * residual Add and a LayerNormalization -> hidden states float [batch, sequence, width] (the output `output`, by
 * default 'hidden'; transformers.js's feature-extraction pipeline reads 'last_hidden_state'). Every activation's
 * size follows (batch, sequence), so requests of varied shapes make ONNX Runtime's memory vary as a real
 * encoder's does.
 */
import { onnx } from 'onnx-proto';

import { encodeModel, graphBuilder, tensorShape } from './onnx-graph.js';

export interface EncoderShape {
  vocabulary: number;
  width: number;
  layers: number;
}
export const ENCODER: EncoderShape = { vocabulary: 8192, width: 256, layers: 4 };

export function encoderModel(shape: EncoderShape = ENCODER, output = 'hidden'): Uint8Array {
  const { vocabulary, width, layers } = shape;
  const FLOAT = onnx.TensorProto.DataType.FLOAT;
  const graph = graphBuilder();
  const { tensor, constant, op } = graph;
  const ones = constant('ones', [width], new Array(width).fill(1));
  const zeros = constant('zeros', [width], new Array(width).fill(0));
  const scale = constant('scale', [], [1 / Math.sqrt(width)]);
  const norm = (x: string, out: string) => op('LayerNormalization', [x, ones, zeros], out, [{ name: 'axis', type: onnx.AttributeProto.AttributeType.INT, i: -1 }]);
  const w = 1 / Math.sqrt(width);
  let h = op('Gather', [tensor('embedding', [vocabulary, width], 1), 'input_ids'], 'h0');
  for (let l = 0; l < layers; l++) {
    const q = op('MatMul', [h, tensor(`q${l}`, [width, width], w)], `q${l}_out`);
    const k = op('MatMul', [h, tensor(`k${l}`, [width, width], w)], `k${l}_out`);
    const v = op('MatMul', [h, tensor(`v${l}`, [width, width], w)], `v${l}_out`);
    const kt = op('Transpose', [k], `kt${l}`, [{ name: 'perm', type: onnx.AttributeProto.AttributeType.INTS, ints: [0, 2, 1] }]);
    const scores = op('Mul', [op('MatMul', [q, kt], `scores${l}`), scale], `scaled${l}`);
    const attention = op('Softmax', [scores], `attention${l}`, [{ name: 'axis', type: onnx.AttributeProto.AttributeType.INT, i: -1 }]);
    const mixed = op('MatMul', [op('MatMul', [attention, v], `context${l}`), tensor(`o${l}`, [width, width], w)], `mixed${l}`);
    const a = norm(op('Add', [h, mixed], `residual${l}`), `a${l}`);
    const up = op('Relu', [op('MatMul', [a, tensor(`up${l}`, [width, 4 * width], w)], `up${l}_out`)], `relu${l}`);
    const down = op('MatMul', [up, tensor(`down${l}`, [4 * width, width], w / 2)], `down${l}_out`);
    h = norm(op('Add', [a, down], `ffn${l}`), l === layers - 1 ? output : `h${l + 1}`);
  }
  return encodeModel(
    'tensorpool-bench-encoder',
    [{ name: 'input_ids', type: { tensorType: { elemType: onnx.TensorProto.DataType.INT64, shape: tensorShape(['batch', 'sequence']) } } }],
    [{ name: output, type: { tensorType: { elemType: FLOAT, shape: tensorShape(['batch', 'sequence', width]) } } }],
    graph,
  );
}

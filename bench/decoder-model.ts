/**
 * A small GPT-like decoder for the benches, built with onnx-proto (random weights, fixed seed; weights as raw
 * little-endian floats): token ids int64 [1, tokens] and, per layer, the cache of the keys and values of the
 * tokens before them, float [1, past, width] -> an embedding Gather, then `layers` blocks of a pre-norm
 * single-head attention (the new tokens' keys and values concatenated to the cache, which the model returns
 * as `present_key_L` / `present_value_L`) and a ReLU feed-forward, each with a residual Add -> logits float
 * [1, tokens, vocabulary]. One run per generated token, its cache fed back: ONNX Runtime's memory per run
 * grows with the cache as a real decoder's does. No causal mask: a prompt's tokens see each other, which
 * changes no cost.
 *
 * hollowDecoderModel() has the same inputs and outputs, of the same sizes for the same tokens, with almost none
 * of the compute: each new key and value is a row of one table, the logits a product with a matrix of width 8.
 * Its runs move the decoder's tensors between JavaScript and ONNX Runtime in a fraction of the decoder's
 * instructions, so that what a run costs around ONNX Runtime (the Node hook's work) stands out.
 */
import { onnx } from 'onnx-proto';

import { encodeModel, graphBuilder, tensorShape, type GraphBuilder } from './onnx-graph.js';

export interface DecoderShape {
  vocabulary: number;
  width: number;
  layers: number;
}
export const DECODER: DecoderShape = { vocabulary: 8192, width: 512, layers: 4 };

export function decoderModel(shape: DecoderShape = DECODER): Uint8Array {
  return build(shape, false);
}

export function hollowDecoderModel(shape: DecoderShape = DECODER): Uint8Array {
  return build(shape, true);
}

function build(shape: DecoderShape, hollow: boolean): Uint8Array {
  const { vocabulary, width, layers } = shape;
  const name = hollow ? 'tensorpool-bench-hollow-decoder' : 'tensorpool-bench-decoder';
  const FLOAT = onnx.TensorProto.DataType.FLOAT;
  const INT = onnx.AttributeProto.AttributeType.INT;
  const graph: GraphBuilder = graphBuilder();
  const { tensor, constant, op } = graph;
  const floats = (name: string, d: (number | string)[]) => ({ name, type: { tensorType: { elemType: FLOAT, shape: tensorShape(d) } } });
  const input: onnx.IValueInfoProto[] = [{ name: 'input_ids', type: { tensorType: { elemType: onnx.TensorProto.DataType.INT64, shape: tensorShape([1, 'tokens']) } } }];
  const output: onnx.IValueInfoProto[] = [floats('logits', [1, 'tokens', vocabulary])];
  const concat = (past: string, now: string, out: string) => op('Concat', [past, now], out, [{ name: 'axis', type: INT, i: 1 }]);
  for (let l = 0; l < layers; l++) {
    input.push(floats(`past_key_${l}`, [1, 'past', width]), floats(`past_value_${l}`, [1, 'past', width]));
    output.push(floats(`present_key_${l}`, [1, 'total', width]), floats(`present_value_${l}`, [1, 'total', width]));
  }
  if (hollow) {
    const row = op('Gather', [tensor('rows', [vocabulary, width], 1), 'input_ids'], 'row');
    for (let l = 0; l < layers; l++) {
      concat(`past_key_${l}`, row, `present_key_${l}`);
      concat(`past_value_${l}`, row, `present_value_${l}`);
    }
    const narrow = op('Gather', [tensor('narrow', [vocabulary, 8], 1), 'input_ids'], 'narrow_row');
    op('MatMul', [narrow, tensor('head', [8, vocabulary], 1)], 'logits');
    return encodeModel(name, input, output, graph);
  }
  const ones = constant('ones', [width], new Array(width).fill(1));
  const zeros = constant('zeros', [width], new Array(width).fill(0));
  const scale = constant('scale', [], [1 / Math.sqrt(width)]);
  const norm = (x: string, out: string) => op('LayerNormalization', [x, ones, zeros], out, [{ name: 'axis', type: INT, i: -1 }]);
  const w = 1 / Math.sqrt(width);
  let h = op('Gather', [tensor('embedding', [vocabulary, width], 1), 'input_ids'], 'h0');
  for (let l = 0; l < layers; l++) {
    const x = norm(h, `x${l}`);
    const q = op('MatMul', [x, tensor(`q${l}`, [width, width], w)], `q${l}_out`);
    const k = concat(`past_key_${l}`, op('MatMul', [x, tensor(`k${l}`, [width, width], w)], `k${l}_out`), `present_key_${l}`);
    const v = concat(`past_value_${l}`, op('MatMul', [x, tensor(`v${l}`, [width, width], w)], `v${l}_out`), `present_value_${l}`);
    const kt = op('Transpose', [k], `kt${l}`, [{ name: 'perm', type: onnx.AttributeProto.AttributeType.INTS, ints: [0, 2, 1] }]);
    const scores = op('Mul', [op('MatMul', [q, kt], `scores${l}`), scale], `scaled${l}`);
    const attention = op('Softmax', [scores], `attention${l}`, [{ name: 'axis', type: INT, i: -1 }]);
    const mixed = op('MatMul', [op('MatMul', [attention, v], `context${l}`), tensor(`o${l}`, [width, width], w)], `mixed${l}`);
    const a = op('Add', [h, mixed], `residual${l}`);
    const up = op('Relu', [op('MatMul', [norm(a, `n${l}`), tensor(`up${l}`, [width, 4 * width], w)], `up${l}_out`)], `relu${l}`);
    h = op('Add', [a, op('MatMul', [up, tensor(`down${l}`, [4 * width, width], w / 2)], `down${l}_out`)], `h${l + 1}`);
  }
  op('MatMul', [norm(h, 'final'), tensor('head', [width, vocabulary], w)], 'logits');
  return encodeModel(name, input, output, graph);
}

/**
 * A local model directory that transformers.js's feature-extraction pipeline loads with no download: the
 * benches' encoder (./encoder-model.ts, random weights) as onnx/model.onnx with its output named
 * 'last_hidden_state', a BERT config, and a WordPiece tokenizer whose vocabulary is made up here (special
 * tokens, single characters, then three-letter pieces) to the encoder's vocabulary size, so that every
 * token id the tokenizer gives is one the embedding holds.
 */
import fs from 'node:fs';
import path from 'node:path';

import { ENCODER, encoderModel } from './encoder-model.js';

const SPECIAL = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'];

/** WordPiece pieces: each special token, character and three-letter piece, alone and as a continuation ('##'). */
function vocabulary(size: number): Record<string, number> {
  const letters = 'abcdefghijklmnopqrstuvwxyz';
  const vocab: Record<string, number> = {};
  let id = 0;
  const add = (piece: string) => {
    if (id < size) vocab[piece] = id++;
  };
  for (const token of SPECIAL) add(token);
  for (const c of `${letters}0123456789.,;:!?'"-()`) {
    add(c);
    add(`##${c}`);
  }
  for (const a of letters) for (const b of letters) for (const c of letters) {
    add(a + b + c);
    add(`##${a}${b}${c}`);
  }
  return vocab;
}

/** Writes the model's directory `dir/name` (config.json, tokenizer.json, tokenizer_config.json, onnx/model.onnx). */
export function writeTextEncoder(dir: string, name: string): string {
  const model = path.join(dir, name);
  fs.mkdirSync(path.join(model, 'onnx'), { recursive: true });
  fs.writeFileSync(path.join(model, 'onnx/model.onnx'), encoderModel(ENCODER, 'last_hidden_state'));
  const { vocabulary: size, width, layers } = ENCODER;
  const config = { model_type: 'bert', architectures: ['BertModel'], vocab_size: size, hidden_size: width, num_hidden_layers: layers, num_attention_heads: 1, max_position_embeddings: 512 };
  fs.writeFileSync(path.join(model, 'config.json'), JSON.stringify(config));
  const sequence = (id: string, typeId: number) => ({ Sequence: { id, type_id: typeId } });
  const special = (id: string, typeId: number) => ({ SpecialToken: { id, type_id: typeId } });
  const tokenizer = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: SPECIAL.map((content, id) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true })),
    normalizer: { type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: true },
    pre_tokenizer: { type: 'BertPreTokenizer' },
    post_processor: {
      type: 'TemplateProcessing',
      single: [special('[CLS]', 0), sequence('A', 0), special('[SEP]', 0)],
      pair: [special('[CLS]', 0), sequence('A', 0), special('[SEP]', 0), sequence('B', 1), special('[SEP]', 1)],
      special_tokens: { '[CLS]': { id: '[CLS]', ids: [2], tokens: ['[CLS]'] }, '[SEP]': { id: '[SEP]', ids: [3], tokens: ['[SEP]'] } },
    },
    decoder: { type: 'WordPiece', prefix: '##', cleanup: true },
    model: { type: 'WordPiece', unk_token: '[UNK]', continuing_subword_prefix: '##', max_input_chars_per_word: 100, vocab: vocabulary(size) },
  };
  fs.writeFileSync(path.join(model, 'tokenizer.json'), JSON.stringify(tokenizer));
  const tokens = { cls_token: '[CLS]', sep_token: '[SEP]', pad_token: '[PAD]', unk_token: '[UNK]', mask_token: '[MASK]' };
  fs.writeFileSync(path.join(model, 'tokenizer_config.json'), JSON.stringify({ tokenizer_class: 'BertTokenizer', do_lower_case: true, model_max_length: 512, ...tokens }));
  return model;
}

/**
 * Loading onnxruntime-node, an optional peer dependency: on first use, from where tensorpool is installed,
 * or the module a caller passes (`options.ort`); and the path of the ONNX Runtime library the process has
 * loaded, which the allocator is registered with. A module that cannot be loaded is ERR_TP_ONNXRUNTIME.
 */
import fs from 'node:fs';
import path from 'node:path';

import { TensorPoolError } from '../errors.js';
import type { OnnxRuntime } from '../onnxruntime-peer.js';
import { describe, invalidArgument } from '../validate.js';

let loaded: OnnxRuntime | undefined;

/** onnxruntime-node, loaded on first use; ERR_TP_ONNXRUNTIME when it is not installed. */
export function loadOnnxRuntime(): OnnxRuntime {
  if (loaded) return loaded;
  try {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    loaded = require('onnxruntime-node') as OnnxRuntime;
  } catch (error) {
    throw new TensorPoolError(
      'ERR_TP_ONNXRUNTIME',
      `onnxruntime-node could not be loaded (${(error as Error).message.split('\n')[0]}): install it beside tensorpool (npm install onnxruntime-node)`,
    );
  }
  return loaded;
}

/** `options.ort` checked: the module given, or onnxruntime-node loaded when none is. */
export function ortOf(value: unknown): OnnxRuntime {
  if (value === undefined) return loadOnnxRuntime();
  const candidate = value as Partial<OnnxRuntime> | null;
  if (!candidate || typeof candidate.Tensor !== 'function' || typeof candidate.InferenceSession?.create !== 'function') {
    throw invalidArgument('type', `options.ort must be the onnxruntime-node module, got ${describe(value)}`);
  }
  return value as OnnxRuntime;
}

/**
 * The path of the ONNX Runtime library this process has loaded (read from /proc/self/maps), which
 * lendToOnnxRuntime() registers with. ERR_TP_ONNXRUNTIME when none is loaded, or several are and none is
 * onnxruntime-node's own.
 */
export function onnxRuntimeLibrary(): string {
  const maps = fs.readFileSync('/proc/self/maps', 'utf8');
  const libraries = [...new Set(maps.split('\n').map((line) => line.slice(line.indexOf('/'))).filter((p) => /\/libonnxruntime\.so[.\d]*$/.test(p)))];
  if (libraries.length === 1) return libraries[0];
  if (libraries.length === 0) {
    throw new TensorPoolError('ERR_TP_ONNXRUNTIME', 'ONNX Runtime is not loaded in this process: load onnxruntime-node first');
  }
  let own: string | undefined;
  try {
    own = path.dirname(path.dirname(require.resolve('onnxruntime-node')));
  } catch {
    own = undefined;
  }
  const mine = own ? libraries.filter((p) => p.startsWith(own + path.sep)) : [];
  if (mine.length === 1) return mine[0];
  throw new TensorPoolError('ERR_TP_ONNXRUNTIME', `several ONNX Runtime libraries are loaded (${libraries.join(', ')}): cannot tell which one the sessions use`);
}

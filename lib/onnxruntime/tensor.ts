/**
 * Tensors over pool memory: an onnxruntime-node Tensor viewing a fresh block of a Pool or of the process
 * pool (zero-copy: ONNX Runtime reads the pool's memory itself), of every element type that has a typed
 * array. The block goes back with the pool's release(), or a PooledSession's while a run may read it.
 */
import type { OnnxRuntime, OrtTensor } from '../onnxruntime-peer.js';
import { Pool } from '../pool/pool.js';
import { ProcessPool } from '../process/process-pool.js';
import { checkOneOf, checkOptions, describe, invalidArgument } from '../validate.js';
import { ortOf } from './load.js';

/** Tensor element types a pooled tensor can have: those with a typed array. */
export const POOLED_TENSOR_TYPES = [
  'float32', 'float64', 'float16', 'int8', 'uint8', 'int16', 'uint16', 'int32', 'uint32', 'int64', 'uint64', 'bool',
] as const;
/** An element type a pooled tensor can have (POOLED_TENSOR_TYPES). */
export type PooledTensorType = (typeof POOLED_TENSOR_TYPES)[number];

const ARRAY_OF: Record<PooledTensorType, { BYTES_PER_ELEMENT: number; new (b: ArrayBuffer, o: number, n: number): ArrayBufferView }> = {
  float32: Float32Array, float64: Float64Array, float16: Uint16Array, int8: Int8Array, uint8: Uint8Array,
  int16: Int16Array, uint16: Uint16Array, int32: Int32Array, uint32: Uint32Array, int64: BigInt64Array,
  uint64: BigUint64Array, bool: Uint8Array,
};

/** Where pooled tensors come from: a Pool, or the process pool (whose alloc and release are malloc's). */
export type TensorSource = Pool | ProcessPool;

/** Throws unless `pool` is a Pool or the process pool. */
export function checkSource(pool: unknown): void {
  if (!(pool instanceof Pool) && !(pool instanceof ProcessPool)) {
    const hint = pool === null ? ' (processPool() is null in a process not started under the preload library, `tensorpool run`)' : '';
    throw invalidArgument('type', `pool must be a Pool or processPool(), got ${describe(pool)}${hint}`);
  }
}

function elementCount(dims: unknown, name: string): number {
  if (!Array.isArray(dims)) throw invalidArgument('type', `${name} must be an array of non-negative integers, got ${describe(dims)}`);
  const wrong = dims.findIndex((d) => !Number.isSafeInteger(d) || d < 0);
  if (wrong >= 0) {
    throw invalidArgument('type', `${name} must be an array of non-negative integers, but ${name}[${wrong}] is ${describe(dims[wrong])}`);
  }
  return dims.reduce((a: number, b: number) => a * b, 1);
}

/**
 * A tensor over a fresh pool block (zero-copy: ONNX Runtime reads the pool memory itself). Its contents are
 * what the block held before: fill it. Give it back with `pool.release(tensor.data)`, or a PooledSession's
 * release() when a run may still read it.
 */
export function pooledTensor(pool: TensorSource, type: PooledTensorType, dims: readonly number[], options?: { ort?: OnnxRuntime }): OrtTensor {
  checkSource(pool);
  const o = checkOptions<{ ort?: OnnxRuntime }>(options, 'options', ['ort']);
  return tensorIn(pool, ortOf(o.ort), type, dims);
}

/** pooledTensor() once the pool and the module are known good: checks the type and the dims. */
export function tensorIn(pool: TensorSource, ort: OnnxRuntime, type: PooledTensorType, dims: readonly number[]): OrtTensor {
  checkOneOf(type, 'type', POOLED_TENSOR_TYPES);
  const length = elementCount(dims, 'dims');
  const array = ARRAY_OF[type];
  const buffer = pool.alloc(Math.max(1, length * array.BYTES_PER_ELEMENT));
  try {
    return new ort.Tensor(type, new array(buffer, 0, length) as never, [...dims]);
  } catch (error) {
    pool.release(buffer);
    throw error;
  }
}

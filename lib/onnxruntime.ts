/**
 * tensorpool/onnxruntime: onnxruntime-node's tensors in a tensorpool Pool.
 *
 * - Inputs over pool memory, zero-copy: `pooledTensor(pool, 'float32', dims)` (release with `pool.release`).
 *   Under `tensorpool run` the pool may be `processPool()`: the tensors are the process's malloc memory,
 *   served by the process pool under its plan with everything else ONNX Runtime allocates.
 * - ONNX Runtime's own allocations (activations, outputs) from the pool: `lendToOnnxRuntime(pool)` registers
 *   the pool as the CPU allocator of ONNX Runtime's environment, and a session created with
 *   `POOLED_ACTIVATIONS` in its options allocates from it instead of its own arena.
 * - `PooledSession` does both and more: one `markIteration()` per run, outputs pre-allocated in the pool
 *   once their shapes are known for the inputs' shapes, stream-ordered release, so a tensor released
 *   while a run that reads it is in flight is reused only after that run has settled, and dead ArrayBuffers
 *   (the app's input arrays, ONNX Runtime's outputs never released) freed before a run once they pile up.
 *
 * onnxruntime-node is an optional peer dependency, loaded on first use (or passed as `options.ort`).
 *
 * @module tensorpool/onnxruntime
 */
export type { OnnxRuntime, OnnxRuntimeFallback, OptionsFallback, OrtRunOptions, OrtSession, OrtSessionOptions, OrtTensor, SessionFallback, TensorFallback } from './onnxruntime-peer.js';
export { POOLED_ACTIVATIONS, lendToOnnxRuntime, onnxRuntimeAllocatorStats, stopLendingToOnnxRuntime } from './onnxruntime/allocator.js';
export { loadOnnxRuntime, onnxRuntimeLibrary } from './onnxruntime/load.js';
export { type Feeds, PooledSession, type PooledSessionOptions } from './onnxruntime/session.js';
export { POOLED_TENSOR_TYPES, type PooledTensorType, type TensorSource, pooledTensor } from './onnxruntime/tensor.js';

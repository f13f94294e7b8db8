/**
 * Set (true) on an onnxruntime-node InferenceSession whose runs its owner marks itself (PooledSession): the
 * Node hook of `tensorpool run` (hooks/node.ts) then marks none of them, so each run stays one iteration.
 */
export const MARKED_ELSEWHERE = Symbol.for('tensorpool.marksIterations');

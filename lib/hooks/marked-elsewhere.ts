/**
 * Set (true) on an onnxruntime-node InferenceSession whose runs its owner marks itself (PooledSession): the
 * Node hook of `tensorpool run` (hooks/node.ts) then marks none of them, so each run stays one iteration,
 * and collects before none of them (the owner does, as it is configured), so no run collects twice.
 */
export const MARKED_ELSEWHERE = Symbol.for('tensorpool.marksIterations');

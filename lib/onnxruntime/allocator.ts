/**
 * The allocator tensorpool lends to ONNX Runtime: a Pool registered as the CPU allocator of ONNX Runtime's
 * environment (a process singleton), which sessions created with POOLED_ACTIVATIONS allocate from instead
 * of an arena of their own; and what ONNX Runtime asked of it.
 */
import { TensorPoolError, fromNative } from '../errors.js';
import { native } from '../native.js';
import type { OnnxRuntime } from '../onnxruntime-peer.js';
import { Pool, nativePoolOf, stopFrontCache } from '../pool/pool.js';
import { checkOptions, describe, invalidArgument } from '../validate.js';
import { onnxRuntimeLibrary, ortOf } from './load.js';

/**
 * Session options that make a session allocate from the environment's allocator (the pool lent with
 * lendToOnnxRuntime) rather than an arena of its own. Merge them into your own options.
 */
export const POOLED_ACTIVATIONS = Object.freeze({
  enableCpuMemArena: false,
  extra: Object.freeze({ session: Object.freeze({ use_env_allocators: '1' }) }),
});

/**
 * Lends `pool` to ONNX Runtime: it becomes the CPU allocator of ONNX Runtime's environment (a process
 * singleton, so one pool at a time; lending another takes over for sessions created afterwards, and a
 * session keeps the pool it was created with). Sessions created with POOLED_ACTIVATIONS in their options
 * allocate their initializers, activations and outputs from it. The pool's front cache is given back and
 * turned off (native threads allocate from it too). Returns ONNX Runtime's version.
 */
export function lendToOnnxRuntime(pool: Pool, options?: { ort?: OnnxRuntime }): string {
  checkPool(pool);
  if (pool.closed) throw new TensorPoolError('ERR_TP_CLOSED', 'the pool is closed');
  const o = checkOptions<{ ort?: OnnxRuntime }>(options, 'options', ['ort']);
  ortOf(o.ort); // loads onnxruntime-node, and with it the library
  try {
    const version = native.registerOrtAllocator(onnxRuntimeLibrary(), nativePoolOf(pool));
    // ONNX Runtime's threads allocate from the pool while JS does: a front cache's log, applied at the next
    // call from JS, would put JS's allocations after theirs, and a plan's schedule and a recording would see
    // an order that never happened.
    stopFrontCache(pool);
    return version;
  } catch (error) {
    throw fromNative(error);
  }
}

/** Sessions created from now on use their own allocator again. ERR_TP_ONNXRUNTIME when no pool is lent. */
export function stopLendingToOnnxRuntime(): void {
  try {
    native.unregisterOrtAllocator();
  } catch (error) {
    throw fromNative(error);
  }
}

/**
 * What ONNX Runtime asked of the pool lent last: allocations served and given back, and those the C
 * library served because the pool was closed.
 */
export function onnxRuntimeAllocatorStats(): { allocs: number; frees: number; heapFallbacks: number } {
  return native.ortAllocatorCounters();
}

function checkPool(pool: unknown): void {
  if (!(pool instanceof Pool)) throw invalidArgument('type', `pool must be a Pool, got ${describe(pool)}`);
}

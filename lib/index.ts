/**
 * tensorpool: a trace-trained CPU memory pool for machine-learning runtimes.
 */
export { Pool, MAX_ALLOC_BYTES } from './pool.js';
export type { PoolOptions, PoolStats, ClassStats, TypedArrayConstructor } from './pool.js';
export { Plan, PLAN_FORMAT, PLAN_VERSION } from './plan.js';
export type { PlanJson, PlanSource, PlanTraining } from './plan.js';
export type { PlanSpec, PlanClass } from './plan-spec.js';
export { faults, measureFaults, memoryUsage } from './faults.js';
export type { FaultCounts, FaultMeasurement, MeasureOptions } from './faults.js';
export { TensorPoolError } from './errors.js';
export type { TensorPoolErrorCode } from './errors.js';

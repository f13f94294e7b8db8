/**
 * tensorpool: a trace-trained CPU memory pool for machine-learning runtimes. `Pool` for tensors JavaScript
 * allocates, `processPool()` under `tensorpool run`, `readTrace()` and `train()` for plans, `planOffsets()`
 * for static offsets, `replay()` to compare allocators on a trace.
 *
 * @module tensorpool
 */
export { Pool, MAX_ALLOC_BYTES } from './pool/pool.js';
export { ProcessPool, processPool, preloadLibrary } from './process/process-pool.js';
export type { ProcessPoolMode } from './process/process-pool.js';
export type { PoolOptions, PoolStats, ClassStats, TypedArrayConstructor, FrontCacheOptions, FrontCacheStats, SharedPool, AttachOptions } from './pool/pool.js';
export type { PoolCounters, MemoryUsage } from './native.js';
export type { AdaptiveOptions, AdaptiveStats, AdaptiveMode, PlanSwitch, IterationReport } from './process/adaptive.js';
export { Plan, PLAN_FORMAT, PLAN_VERSION } from './plan/plan.js';
export type { PlanJson, PlanSource, PlanTraining } from './plan/plan.js';
export type { PlanSpec, PlanClass } from './plan/plan-spec.js';
export { faults, measureFaults, memoryUsage } from './faults.js';
export type { FaultCounts, FaultMeasurement, MeasureOptions } from './faults.js';
export { TensorPoolError } from './errors.js';
export type { TensorPoolErrorCode } from './errors.js';
export { readTrace, readProblem, parseTrace, detectFormat } from './trace/read.js';
export { Trace, TraceBuilder, EventOp } from './trace/trace.js';
export type { TraceFormat, TraceSummary, TraceAnomalies } from './trace/trace.js';
export { problemToTrace, problemFromTrace, parseProblemCsv } from './trace/problem.js';
export type { Problem } from './trace/problem.js';
export { train, AUTO_INTERVALS, SMALL_AUTO_INTERVALS, TRAIN_ORDERS } from './plan/train.js';
export type { TrainOptions, TrainOrder, TrainCandidate, SpansChoice } from './plan/train.js';
export { syntheticTrainingTrace } from './trace/synthetic.js';
export { repeatIteration } from './trace/repeat.js';
export type { SyntheticOptions } from './trace/synthetic.js';
export { replay, TOUCH_MODES } from './replay/replay.js';
export type { ReplayOptions, ReplayReport, AllocatorResult, TouchMode } from './replay/replay.js';
export { ALLOCATOR_NAMES } from './replay/allocators.js';
export type { AllocatorName } from './replay/allocators.js';
export { planOffsets, verifyOffsets, mutexGraph, STRATEGIES } from './offsets/planner.js';
export type { Strategy, OffsetLayout, PlanOffsetsOptions, ConflictProblem, OperatorGraph, PlanningInput } from './offsets/planner.js';
export { OffsetPlan, OFFSET_PLAN_FORMAT, OFFSET_PLAN_VERSION } from './offsets/offset-plan.js';
export type { OffsetPlanOptions, OffsetPlanSource } from './offsets/offset-plan.js';
export { Stream, StreamEvent } from './pool/stream.js';
// Types the API above refers to (in its signatures and results).
export type { PlanSchedule, PlanLayout, PlanServe, PlanSpans } from './plan/plan-spec.js';
export type { PoolStats as ProcessPoolStats } from './pool/pool-control.js';
export type { RepetitionRecord, PoolCounters as ReplayPoolCounters } from './replay/protocol.js';
export type { MedianInterval } from './report/stats.js';
export type { MachineInfo } from './report/machine.js';
export type { DetectedFormat } from './trace/read.js';
export type { TraceParts } from './trace/trace.js';

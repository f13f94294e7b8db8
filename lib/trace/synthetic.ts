/**
 * Synthetic training-loop traces, for tests and benchmarks that need sizes the shared traces do not have
 * (100k and 1M events). The shape follows a real step: the forward pass keeps one activation per layer and
 * frees its temporaries; the backward pass walks the layers in reverse, freeing each activation as its
 * gradient is made; the optimizer consumes the weight gradients. Every iteration repeats the same sizes
 * (as a fixed model and batch do); a seeded generator makes the trace reproducible.
 */
import { checkBoolean, checkInteger, checkOptions, describe, invalidArgument } from '../validate.js';
import { Trace, TraceBuilder } from './trace.js';

/** Options of syntheticTrainingTrace(). */
export interface SyntheticOptions {
  /** Layers of the model. Default 48. */
  layers?: number;
  /** Iterations; or give `events` to generate iterations until at least that many events. Default 4. */
  iterations?: number;
  events?: number;
  /** Scales every activation (a larger batch). Default 1. */
  batchScale?: number;
  /** Seed of the size generator. Default 1. */
  seed?: number;
  /** Largest activation in bytes. Default 16 MiB. */
  maxActivation?: number;
  /**
   * Keep the weight gradients live until the next step frees them first thing (as PyTorch's
   * zero_grad(set_to_none=True) does in the shared traces), so buffers cross every iteration boundary.
   * Default false: gradients die after the optimizer step.
   */
  carryGradients?: boolean;
}

function random(seed: number): () => number {
  let state = seed >>> 0 || 1;
  return () => {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    return (state >>> 0) / 4294967296;
  };
}

const SYNTHETIC_OPTIONS = ['layers', 'iterations', 'events', 'batchScale', 'seed', 'maxActivation', 'carryGradients'] as const;
/** The most events a synthetic trace may have (about 1.6 GB of trace model). */
export const MAX_SYNTHETIC_EVENTS = 1e8;

/**
 * A generated trace of a training loop (forward activations kept for the backward pass, gradients, optimizer
 * state), for tests and benchmarks when no recorded trace is at hand.
 */
export function syntheticTrainingTrace(options: SyntheticOptions = {}): Trace {
  const o = checkOptions<SyntheticOptions>(options, 'options', SYNTHETIC_OPTIONS);
  const layers = o.layers === undefined ? 48 : checkInteger(o.layers, 'options.layers', 1, 100_000);
  if (o.iterations !== undefined) checkInteger(o.iterations, 'options.iterations', 1, 1_000_000);
  if (o.events !== undefined) checkInteger(o.events, 'options.events', 1, MAX_SYNTHETIC_EVENTS);
  if (o.seed !== undefined) checkInteger(o.seed, 'options.seed', 0, 2 ** 32 - 1);
  if (o.carryGradients !== undefined) checkBoolean(o.carryGradients, 'options.carryGradients');
  const batchScale = o.batchScale ?? 1;
  if (typeof batchScale !== 'number' || !(batchScale > 0 && batchScale <= 1e4)) {
    throw invalidArgument('range', `options.batchScale must be a number in (0, 10000], got ${describe(batchScale)}`);
  }
  const maxActivation = o.maxActivation === undefined ? 16 << 20 : checkInteger(o.maxActivation, 'options.maxActivation', 4096, 2 ** 40);
  // An iteration has at most 8 events a layer (activation, two temporaries, weight gradient, their frees).
  if (o.events === undefined && 8 * layers * (o.iterations ?? 4) > MAX_SYNTHETIC_EVENTS) {
    throw invalidArgument('range', `options.layers x options.iterations would make more than ${MAX_SYNTHETIC_EVENTS} events`);
  }
  const next = random(o.seed ?? 1);
  const logUniform = (min: number, max: number) => Math.round(Math.exp(Math.log(min) + next() * Math.log(max / min)) / 4) * 4;
  // Per layer: activation, one or two temporaries, weight (gradient) size. Fixed for the whole run.
  const shape = Array.from({ length: layers }, () => ({
    activation: Math.max(4, Math.round(logUniform(4096, maxActivation) * batchScale / 4) * 4),
    temporaries: [logUniform(64, 1 << 20), ...(next() < 0.5 ? [logUniform(64, 64 << 10)] : [])],
    weight: logUniform(256, 4 << 20),
  }));
  const input = Math.max(4, Math.round(3 * 224 * 224 * 4 * batchScale / 4) * 4);

  const builder = new TraceBuilder();
  const iterations = options.events === undefined ? (options.iterations ?? 4) : Number.POSITIVE_INFINITY;
  let carried: { buffer: number; size: number }[] = [];
  for (let it = 0; it < iterations; it++) {
    if (it > 0) builder.mark();
    for (const g of carried) builder.free(g.buffer, 0);
    const x = builder.alloc(input, 0);
    const activations: number[] = [];
    for (const layer of shape) {
      const temps = layer.temporaries.map((size) => builder.alloc(size, 0));
      activations.push(builder.alloc(layer.activation, 0));
      for (const t of temps) builder.free(t, 0);
    }
    const loss = builder.alloc(4, 0);
    const gradients: { buffer: number; size: number }[] = [];
    let upstream = builder.alloc(shape[layers - 1].activation, 0);
    for (let l = layers - 1; l >= 0; l--) {
      gradients.push({ buffer: builder.alloc(shape[l].weight, 0), size: shape[l].weight });
      const scratch = builder.alloc(shape[l].temporaries[0], 0);
      const down = builder.alloc(l > 0 ? shape[l - 1].activation : input, 0);
      builder.free(scratch, 0);
      builder.free(activations[l], 0);
      builder.free(upstream, 0);
      upstream = down;
    }
    builder.free(upstream, 0);
    builder.free(loss, 0);
    for (const g of gradients) {
      const update = builder.alloc(g.size, 0); // the optimizer's scratch, e.g. momentum * grad
      builder.free(update, 0);
      if (!options.carryGradients) builder.free(g.buffer, 0);
    }
    if (options.carryGradients) carried = gradients;
    builder.free(x, 0);
    if (options.events !== undefined && builder.events >= options.events) break;
  }
  return builder.build(
    `synthetic(layers=${layers}, batchScale=${batchScale}, seed=${options.seed ?? 1}${options.carryGradients ? ', carryGradients' : ''})`,
    'synthetic',
  );
}

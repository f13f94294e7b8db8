/**
 * The types of onnxruntime-node that tensorpool/onnxruntime's API names, standing alone. onnxruntime-node is
 * an optional peer dependency: where it is installed these are its own types (OrtTensor is its Tensor,
 * OnnxRuntime the module's type); where it is not, they are the structural types below, of what tensorpool
 * uses of it, so that a program importing tensorpool/onnxruntime type-checks either way (`tsc --strict`,
 * without skipLibCheck).
 *
 * How: the import below carries a JSDoc `@ts-ignore`, which TypeScript keeps in the declarations it emits (a
 * `//` comment it drops). Where the module is missing its types are the error type, which `unknown extends`
 * tells apart from any type the module declares. scripts/package-check.sh checks an empty project without
 * onnxruntime-node; the repository's own type check (onnxruntime-node installed) checks the other side.
 */
// eslint-disable-next-line @typescript-eslint/ban-ts-comment -- @ts-expect-error would fail where the peer is installed
/** @ts-ignore onnxruntime-node is an optional peer: where it is missing, its types below fall back to the structural ones */
import type * as peer from 'onnxruntime-node';

/** What tensorpool uses of an onnxruntime-node `Tensor`: the type of OrtTensor where onnxruntime-node is not installed. */
export interface TensorFallback {
  readonly type: string;
  readonly dims: readonly number[];
  readonly data: ArrayBufferView | readonly string[];
  readonly size: number;
}

/** Session or run options: the type of OrtSessionOptions and OrtRunOptions where onnxruntime-node is not installed. */
export interface OptionsFallback {
  readonly [option: string]: unknown;
}

/** What tensorpool uses of an onnxruntime-node `InferenceSession`: the type of OrtSession where onnxruntime-node is not installed. */
export interface SessionFallback {
  readonly inputNames: readonly string[];
  readonly outputNames: readonly string[];
  /** Runs the model on `feeds`, the inputs by name; the outputs by name. */
  run(feeds: Record<string, TensorFallback>, options?: OptionsFallback): Promise<Record<string, TensorFallback>>;
  /** Frees the session's native resources. */
  release(): Promise<void>;
}

/** What tensorpool uses of the onnxruntime-node module: the type of OnnxRuntime where onnxruntime-node is not installed. */
export interface OnnxRuntimeFallback {
  /** Tensors. */
  readonly Tensor: {
    /** A tensor of `type` over `data`, of shape `dims`. */
    new (type: string, data: ArrayBufferView | readonly string[], dims?: readonly number[]): TensorFallback;
  };
  /** Sessions of a model. */
  readonly InferenceSession: {
    /** Loads `model` (a file's path or its bytes). */
    create(model: string | Uint8Array, options?: OptionsFallback): Promise<SessionFallback>;
  };
}

/** onnxruntime-node's `Tensor` (TensorFallback where onnxruntime-node is not installed). */
export type OrtTensor = unknown extends peer.Tensor ? TensorFallback : peer.Tensor;

/** onnxruntime-node's `InferenceSession` (SessionFallback where onnxruntime-node is not installed). */
export type OrtSession = unknown extends peer.InferenceSession ? SessionFallback : peer.InferenceSession;

/** onnxruntime-node's `InferenceSession.SessionOptions` (OptionsFallback where onnxruntime-node is not installed). */
export type OrtSessionOptions = unknown extends peer.InferenceSession.SessionOptions ? OptionsFallback : peer.InferenceSession.SessionOptions;

/** onnxruntime-node's `InferenceSession.RunOptions` (OptionsFallback where onnxruntime-node is not installed). */
export type OrtRunOptions = unknown extends peer.InferenceSession.RunOptions ? OptionsFallback : peer.InferenceSession.RunOptions;

/** The onnxruntime-node module's type (OnnxRuntimeFallback where it is not installed; loadOnnxRuntime() loads it). */
export type OnnxRuntime = unknown extends typeof peer ? OnnxRuntimeFallback : typeof peer;

/**
 * Errors thrown by tensorpool. Every error a caller can provoke carries a stable `code`, so programs can
 * react to it without parsing messages.
 */
export type TensorPoolErrorCode =
  | 'ERR_TP_INVALID_ARGUMENT'
  | 'ERR_TP_CLOSED'
  | 'ERR_TP_DOUBLE_RELEASE'
  | 'ERR_TP_FOREIGN_BUFFER'
  | 'ERR_TP_OUT_OF_MEMORY'
  | 'ERR_TP_POOL_CREATE'
  | 'ERR_TP_BAD_PLAN'
  | 'ERR_TP_BAD_TRACE'
  | 'ERR_TP_BAD_PROBLEM'
  | 'ERR_TP_UNSUPPORTED'
  | 'ERR_TP_NO_PROCESS_POOL'
  | 'ERR_TP_PRELOAD_MISMATCH'
  | 'ERR_TP_ONNXRUNTIME'
  | 'ERR_TP_RELEASED'
  | 'ERR_TP_OUTPUT_SHAPE'
  | 'ERR_TP_BUSY'
  | 'ERR_TP_NOT_SHARED'
  | 'ERR_TP_NOT_OWNER'
  | 'ERR_TP_WRITE'
  | 'ERR_TP_NO_ADDON';

/** The errors tensorpool throws: `code` says which (TensorPoolErrorCode), the message what was wrong. */
export class TensorPoolError extends Error {
  readonly code: TensorPoolErrorCode;
  /** An error of `code`; `options.cause` keeps the error that led to it. */
  constructor(code: TensorPoolErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'TensorPoolError';
    this.code = code;
  }
}

/** Wraps an error from the native addon (which sets `code`) as a TensorPoolError. */
export function fromNative(error: unknown): unknown {
  const code = (error as { code?: unknown } | null)?.code;
  if (error instanceof Error && typeof code === 'string') {
    if (code.startsWith('ERR_TP_')) return new TensorPoolError(code as TensorPoolErrorCode, error.message);
  }
  return error;
}

/**
 * Argument checks shared by every public entry point: each names the argument and what it must be, and
 * throws a TypeError / RangeError carrying code ERR_TP_INVALID_ARGUMENT.
 */

function invalid(kind: 'type' | 'range', message: string): Error {
  const error = kind === 'type' ? new TypeError(message) : new RangeError(message);
  (error as Error & { code: string }).code = 'ERR_TP_INVALID_ARGUMENT';
  return error;
}

export function describe(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'string') return `the string ${JSON.stringify(value.length > 40 ? value.slice(0, 40) + '…' : value)}`;
  if (typeof value === 'number' || typeof value === 'bigint' || typeof value === 'boolean') return String(value);
  if (typeof value === 'function') return 'a function';
  if (typeof value === 'symbol') return 'a symbol';
  if (typeof value !== 'object') return typeof value; // undefined
  const type = (value as object).constructor?.name;
  return !type || type === 'Object' ? 'an object' : `${/^[AEIOU]/.test(type) ? 'an' : 'a'} ${type}`;
}

/** An integer in [min, max] (safe integers only). */
export function checkInteger(value: unknown, name: string, min = 0, max = Number.MAX_SAFE_INTEGER): number {
  if (typeof value !== 'number' || !Number.isInteger(value)) {
    throw invalid('type', `${name} must be an integer, got ${describe(value)}`);
  }
  if (value < min || value > max) throw invalid('range', `${name} must be between ${min} and ${max}, got ${value}`);
  return value;
}

export function checkBoolean(value: unknown, name: string): boolean {
  if (typeof value !== 'boolean') throw invalid('type', `${name} must be a boolean, got ${describe(value)}`);
  return value;
}

export function checkString(value: unknown, name: string): string {
  if (typeof value !== 'string' || value.length === 0) {
    throw invalid('type', `${name} must be a non-empty string, got ${describe(value)}`);
  }
  return value;
}

export function checkFunction(value: unknown, name: string): void {
  if (typeof value !== 'function') throw invalid('type', `${name} must be a function, got ${describe(value)}`);
}

export function checkOneOf<T extends string>(value: unknown, name: string, allowed: readonly T[]): T {
  if (typeof value !== 'string' || !allowed.includes(value as T)) {
    throw invalid('type', `${name} must be one of ${allowed.map((a) => `'${a}'`).join(', ')}, got ${describe(value)}`);
  }
  return value as T;
}

/** A plain options object (or undefined, read as {}) with no keys outside `known`: a typo is an error. */
export function checkOptions<T extends object>(value: unknown, name: string, known: readonly string[]): Partial<T> {
  if (value === undefined) return {};
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw invalid('type', `${name} must be an object, got ${describe(value)}`);
  }
  for (const key of Object.keys(value)) {
    if (!known.includes(key)) {
      throw invalid('type', `${name} has no option '${key}' (known: ${known.join(', ')})`);
    }
  }
  return value as Partial<T>;
}

export { invalid as invalidArgument };

/**
 * JSON text in pieces: what JSON.stringify(value, null, indent) returns, without ever holding it as one
 * string (V8 refuses strings above ~512 MiB: a plan trained on a large trace is longer).
 */

/** The pieces of JSON.stringify(value, null, indent) + '\n', in order (for JSON values: plain data). */
export function* jsonPieces(value: unknown, indent = ''): Generator<string> {
  yield* piecesOf(value, indent, '\n');
  yield '\n';
}

function* piecesOf(value: unknown, indent: string, newline: string): Generator<string> {
  if (value !== null && typeof value === 'object' && typeof (value as { toJSON?: unknown }).toJSON === 'function') {
    value = (value as { toJSON(): unknown }).toJSON();
  }
  if (value === null || typeof value !== 'object') {
    yield JSON.stringify(value) ?? 'null';
    return;
  }
  const inner = indent ? newline + indent : '';
  const separator = indent ? ': ' : ':';
  if (Array.isArray(value)) {
    if (value.length === 0) {
      yield '[]';
      return;
    }
    yield '[';
    for (let i = 0; i < value.length; i++) {
      yield i === 0 ? inner : ',' + inner;
      const item = value[i];
      if (item === undefined || typeof item === 'function' || typeof item === 'symbol') yield 'null';
      else yield* piecesOf(item, indent, inner);
    }
    yield (indent ? newline : '') + ']';
    return;
  }
  let first = true;
  for (const [key, item] of Object.entries(value)) {
    if (item === undefined || typeof item === 'function' || typeof item === 'symbol') continue;
    yield (first ? '{' : ',') + inner + JSON.stringify(key) + separator;
    first = false;
    yield* piecesOf(item, indent, inner);
  }
  yield first ? '{}' : (indent ? newline : '') + '}';
}

/**
 * File input and output shared by every reader and writer: reads bounded, never a partial file written, never
 * a special file replaced, every error naming the file.
 */
import { constants as bufferConstants } from 'node:buffer';
import fs from 'node:fs';
import nodePath from 'node:path';

import { TensorPoolError, type TensorPoolErrorCode } from '../errors.js';

/** What a writer writes: all at once, or piece by piece (a large plan is never one string). */
export type FileContents = string | Uint8Array | Iterable<string>;

// Pieces are gathered up to this many characters before each write.
const WRITE_CHUNK = 1 << 20;

/**
 * Writes through a temporary file and a rename, so a reader never sees half a file and a failed write leaves
 * none. What already stands at `path` decides how: a symbolic link is followed (its target is written, the
 * link stays; a dangling link's target is created); a regular file keeps its mode; a device, FIFO or socket
 * is written through as it is (renaming over it would replace a node such as /dev/full with a regular file);
 * a directory is refused. Every error names `path` (ERR_TP_WRITE, with the system's code as `cause`).
 */
export function writeFileAtomic(path: string, data: FileContents): void {
  try {
    writeThrough(path, data);
  } catch (error) {
    if (error instanceof TensorPoolError) throw error;
    throw new TensorPoolError('ERR_TP_WRITE', `${path}: cannot write: ${(error as Error).message}`, { cause: error });
  }
}

function writeThrough(path: string, data: FileContents): void {
  const target = linkTarget(path);
  let existing: fs.Stats | undefined;
  try {
    existing = fs.statSync(target);
  } catch {
    // nothing there yet: a new file
  }
  if (existing?.isDirectory()) throw new TensorPoolError('ERR_TP_WRITE', `${path}: is a directory`);
  if (existing && !existing.isFile()) {
    writeAll(target, 'w', data);
    return;
  }
  const temporary = `${target}.tmp-${process.pid}`;
  fs.rmSync(temporary, { force: true }); // left by a process of the same id that died mid-write
  try {
    writeAll(temporary, 'wx', data, existing && existing.mode & 0o7777);
    fs.renameSync(temporary, target);
  } catch (error) {
    fs.rmSync(temporary, { force: true });
    throw error;
  }
}

/** Where a write to `path` lands: the end of its chain of symbolic links (dangling or not), else `path`. */
function linkTarget(path: string): string {
  let at = path;
  for (let hops = 0; hops < 40; hops++) {
    let link: string;
    try {
      link = fs.readlinkSync(at);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'EINVAL' || (error as NodeJS.ErrnoException).code === 'ENOENT') return at;
      throw error;
    }
    at = nodePath.resolve(nodePath.dirname(at), link);
  }
  throw Object.assign(new Error('too many levels of symbolic links'), { code: 'ELOOP' });
}

function writeAll(file: string, flags: string, data: FileContents, mode?: number): void {
  const fd = fs.openSync(file, flags, mode ?? 0o666);
  try {
    if (mode !== undefined) fs.fchmodSync(fd, mode); // the mode the file had, whatever the umask
    if (typeof data === 'string' || data instanceof Uint8Array) {
      fs.writeFileSync(fd, data);
      return;
    }
    let pending = '';
    for (const piece of data) {
      pending += piece;
      if (pending.length >= WRITE_CHUNK) {
        fs.writeFileSync(fd, pending);
        pending = '';
      }
    }
    if (pending) fs.writeFileSync(fd, pending);
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * Reads at most `maxBytes` from the file at `path`, of any kind (a device or FIFO has no size to trust): an
 * endless source (/dev/zero, a pipe that never closes) ends in `tooLarge()` instead of growing until the
 * process aborts.
 */
export function readBounded(path: string, maxBytes: number, tooLarge: () => Error): Buffer {
  const fd = fs.openSync(path, 'r');
  try {
    const stat = fs.fstatSync(fd);
    if (stat.isDirectory()) throw Object.assign(new Error('is a directory'), { code: 'EISDIR' });
    if (stat.isFile() && stat.size > maxBytes) throw tooLarge();
    const chunks: Buffer[] = [];
    let total = 0;
    for (;;) {
      const chunk = Buffer.allocUnsafe(stat.isFile() ? Math.max(1, Math.min(stat.size + 1, 1 << 26)) : 1 << 20);
      const n = fs.readSync(fd, chunk, 0, chunk.length, null);
      if (n === 0) break;
      total += n;
      if (total > maxBytes) throw tooLarge();
      chunks.push(n === chunk.length ? chunk : chunk.subarray(0, n));
    }
    return chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, total);
  } finally {
    fs.closeSync(fd);
  }
}

/** The most bytes a JSON file (a plan) may hold: V8's longest string, which JSON.parse reads it as. */
export const MAX_JSON_BYTES = bufferConstants.MAX_STRING_LENGTH;

/**
 * The JSON value in the file at `path`, read bounded (MAX_JSON_BYTES); an unreadable, oversized or malformed
 * file is `code` with a message naming the file and `what` it should have held.
 */
export function readJsonFile(path: string, what: string, code: TensorPoolErrorCode): unknown {
  let text: string;
  try {
    const tooLarge = () =>
      new TensorPoolError(code, `${path}: the ${what} is more than ${MAX_JSON_BYTES} bytes, the most a ${what} may hold (V8's longest string)`);
    text = readBounded(path, MAX_JSON_BYTES, tooLarge).toString('utf8');
  } catch (error) {
    if (error instanceof TensorPoolError) throw error;
    throw new TensorPoolError(code, `${path}: cannot read the ${what}: ${(error as Error).message}`);
  }
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new TensorPoolError(code, `${path}: not valid JSON: ${(error as Error).message}`);
  }
}

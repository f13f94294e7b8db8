/** File output shared by every writer: never a partial file, and never a special file replaced. */
import fs from 'node:fs';

import { TensorPoolError } from './errors.js';

/**
 * Writes through a temporary file and a rename, so a reader never sees half a file and a failed write leaves
 * none. What already stands at `path` decides how: a symbolic link is followed (its target is written, the
 * link stays); a device, FIFO or socket is written through as it is (renaming over it would replace a node
 * such as /dev/full with a regular file); a directory is refused.
 */
export function writeFileAtomic(path: string, data: string | Uint8Array): void {
  let existing: fs.Stats | undefined;
  try {
    existing = fs.statSync(path);
  } catch {
    // nothing there yet (or a dangling link, which the rename then replaces): a new file
  }
  if (existing?.isDirectory()) throw new TensorPoolError('ERR_TP_INVALID_ARGUMENT', `${path}: is a directory`);
  if (existing && !existing.isFile()) {
    fs.writeFileSync(path, data);
    return;
  }
  const target = existing ? fs.realpathSync(path) : path;
  const temporary = `${target}.tmp-${process.pid}`;
  try {
    fs.writeFileSync(temporary, data);
    fs.renameSync(temporary, target);
  } catch (error) {
    fs.rmSync(temporary, { force: true });
    throw error;
  }
}

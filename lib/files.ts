/** File output shared by every writer: never a partial file. */
import fs from 'node:fs';

/** Writes through a temporary file and a rename, so a reader never sees half a file and a failed write leaves none. */
export function writeFileAtomic(path: string, data: string | Uint8Array): void {
  const temporary = `${path}.tmp-${process.pid}`;
  try {
    fs.writeFileSync(temporary, data);
    fs.renameSync(temporary, path);
  } catch (error) {
    fs.rmSync(temporary, { force: true });
    throw error;
  }
}

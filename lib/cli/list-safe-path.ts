/**
 * Paths that can stand in a list variable. The dynamic loader splits LD_PRELOAD at spaces and colons with no
 * way to escape either, and Python splits PYTHONPATH at colons: a package installed under such a path
 * (`/home/me/My Projects/app/node_modules/tensorpool`) would silently run without the library. Such a path
 * is reached through a symbolic link in a directory of the user's own under the system's temporary directory.
 */
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { CliError } from './common.js';

/** What splits a list in LD_PRELOAD (space, tab, newline, colon) or PYTHONPATH (colon). */
const SEPARATOR = /[\s:]/;

/**
 * `file` itself when nothing in it splits a list; else a link to it named by a hash of its real path, in
 * `<tmpdir>/tensorpool-<uid>` (made with mode 0700; refused unless it is a directory of this user that no one
 * else can write, not a link). Throws a CliError where no such link can be made.
 */
export function listSafePath(file: string, tmpdir = os.tmpdir()): string {
  if (!SEPARATOR.test(file)) return file;
  const target = fs.realpathSync(file);
  const uid = process.getuid?.() ?? 0;
  const dir = path.join(tmpdir, `tensorpool-${uid}`);
  const refuse = (why: string): never => {
    throw new CliError(`tensorpool run: ${JSON.stringify(file)} contains a space or a colon, which LD_PRELOAD and PYTHONPATH cannot hold, and no link to it could be made in ${dir}: ${why}`);
  };
  if (SEPARATOR.test(dir)) refuse('that directory has a space or a colon too (set TMPDIR to another directory)');
  try {
    fs.mkdirSync(dir, { mode: 0o700 });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') refuse((error as Error).message);
  }
  const stat = fs.lstatSync(dir);
  if (!stat.isDirectory()) refuse('it is not a directory');
  if (stat.uid !== uid) refuse(`it belongs to user ${stat.uid}`);
  if ((stat.mode & 0o022) !== 0) refuse(`others can write to it (mode ${(stat.mode & 0o777).toString(8)})`);
  const name = `${createHash('sha256').update(target).digest('hex').slice(0, 16)}-${path.basename(target).replace(/[\s:]/g, '_')}`;
  const link = path.join(dir, name);
  try {
    if (fs.readlinkSync(link) === target) return link;
  } catch {
    // absent (or not a link): made below
  }
  // A link made under another name and renamed over `link`: a process reading it meanwhile sees the old or the new.
  const temporary = `${link}.${process.pid}.tmp`;
  try {
    fs.rmSync(temporary, { force: true });
    fs.symlinkSync(target, temporary);
    fs.renameSync(temporary, link);
  } catch (error) {
    fs.rmSync(temporary, { force: true });
    refuse((error as Error).message);
  }
  return link;
}

/**
 * The live view of a running process's pool (`tensorpool stats PID`): read from the stats page the preload
 * library keeps in every process whose pool is made (native/preload/stats_page.h), through /proc/PID/mem at
 * its address in /proc/PID/maps, with no signal, the program not stopped and nothing asked of it. The page's counters are the pool's own (it counts in
 * the page); its gauges (the arenas' bytes, idle bytes, the table by size) are what the program last published.
 * Beside them: the process's RSS and page faults (/proc/PID/status, /proc/PID/stat) and the arenas' resident
 * bytes (/proc/PID/pagemap over their carved ranges).
 */
import fs from 'node:fs';

/** The page's name in /proc/PID/maps (a memfd). */
const PAGE_NAME = '/memfd:tensorpool-stats';
/** What the preload library's file is called, in /proc/PID/maps of a process that loaded it. */
const LIBRARY_NAME = 'tensorpool-preload.so';
const MAGIC = 'TPSTATS\0';
const PAGE_VERSION = 2;
/** x86-64's base page (the package is built for Linux x86-64): /proc/PID/pagemap has one entry a page. */
const PAGE_BYTES = 4096;
/** The fields of a bucket of the table by size, in the page's order (core/pool_gauges.h SizeBucket). */
const BUCKET_FIELDS = ['liveBlocks', 'liveBytes', 'osBlocks', 'osBytes', 'freeBlocks', 'idleBytes', 'givenBackBytes'] as const;

/** Why a process's pool could not be read; `message` is one line, naming the pid. */
export type LiveStatsFailure = 'gone' | 'other-user' | 'not-under-library' | 'not-made' | 'unreadable' | 'other-version';

export class LiveStatsError extends Error {
  constructor(
    readonly pid: number,
    readonly reason: LiveStatsFailure,
    message: string,
  ) {
    super(message);
    this.name = 'LiveStatsError';
  }
}

/** Blocks and spans whose capacity lies in [from, 2 * from): what is live there and what is free. */
export interface SizeRow {
  /** The bucket's smallest capacity in bytes (a power of two). */
  from: number;
  /** Live blocks and spans of the arenas, and the bytes asked for (a block of a class: its capacity). */
  liveBlocks: number;
  liveBytes: number;
  /** Live blocks the OS mapped (fallbacks, oversize, moved by realloc), and the bytes asked for. */
  osBlocks: number;
  osBytes: number;
  /** Free blocks and spans of the serving classes; the capacity of those holding their pages; of those given back. */
  freeBlocks: number;
  idleBytes: number;
  givenBackBytes: number;
}

export interface LiveStats {
  pid: number;
  /** The process's command line (/proc/PID/cmdline), arguments joined by spaces. */
  command: string;
  /** As processPool(): 'default', 'planned', 'recording' or 'adaptive'. */
  mode: string;
  minBytes: number;
  /** The decay period in ms (TENSORPOOL_DECAY_MS), or null when decay is off. */
  decayMs: number | null;
  planPath: string | null;
  recordPath: string | null;
  /** The package version of the library the process loaded. */
  version: string;
  /**
   * The pool's counters now, named as processPool().stats() names them (allocs, releases, hits, borrows,
   * grown, osFallbacks, osOversize, liveBlocks, bytesLive, peakBytesLive, osLiveBlocks, osLiveBytes,
   * iterations, generation, switches, scheduleHits, scheduleMisses, purgedBlocks, purgedBytes, rewarmedBytes, ...).
   */
  counters: Record<string, number>;
  /** False where no read of the counters caught them between two updates (a very busy pool): each is whole. */
  countersSettled: boolean;
  /**
   * What the program last published (arenaBytes, reservedBytes, committedBytes, arenas, preparedGeneration,
   * idleBytes), or null before its first publication.
   */
  gauges: Record<string, number> | null;
  /** How long ago the gauges were published (ms), and how many allocations and releases the pool has made since. */
  gaugesAgeMs: number | null;
  opsSinceGauges: number;
  /** Bytes of the arenas' carved memory in RAM now (the kernel's page tables), or null where unknown. */
  residentBytes: number | null;
  /** The process: resident set now and at its peak, page faults since it started. */
  rssBytes: number;
  peakRssBytes: number;
  minorFaults: number;
  majorFaults: number;
  /** With `bySize`: the table, and how long ago the program worked it out; null where it did not answer in time. */
  bySize?: { rows: SizeRow[]; ageMs: number } | null;
}

export interface ReadOptions {
  /** Ask the program for the table by size and wait for it (up to bySizeWaitMs, default 5000). */
  bySize?: boolean;
  bySizeWaitMs?: number;
}

/** The page's header (native/preload/stats_page.cc StatsPageHeader: the offsets are pinned there). */
interface PageLayout {
  pageBytes: number;
  directoryOffset: number;
  fieldCount: number;
  gaugesOffset: number;
  gaugesBytes: number;
  bucketsOffset: number;
  bucketCount: number;
  bucketBytes: number;
  rangesOffset: number;
  rangeCountOffset: number;
  rangeMax: number;
}

/** The page of `pid` open for reading: /proc/PID/mem, and the page's address in it. */
interface OpenPage {
  fd: number;
  base: number;
}

/** The command line of process `pid` (/proc/PID/cmdline), arguments joined by spaces; '?' where unreadable. */
export function commandOf(pid: number): string {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean).join(' ');
  } catch {
    return '?';
  }
}

/** "pid 123 (node server.js)", its command cut to 60 characters. */
function named(pid: number): string {
  const command = commandOf(pid);
  return `pid ${pid} (${command.length > 60 ? command.slice(0, 57) + '...' : command || '?'})`;
}

/** The failure of a process that ended while it was being read. */
function exited(pid: number): LiveStatsError {
  return new LiveStatsError(pid, 'gone', `pid ${pid}: no such process (it has exited)`);
}

/** /proc/PID/maps, or the one-line failure that says why it cannot be read. */
function mapsOf(pid: number): string {
  try {
    return fs.readFileSync(`/proc/${pid}/maps`, 'utf8');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ESRCH') throw new LiveStatsError(pid, 'gone', `pid ${pid}: no such process`);
    if (code === 'EACCES' || code === 'EPERM') {
      let owner: number | null = null;
      try {
        owner = fs.statSync(`/proc/${pid}`).uid;
      } catch {
        // gone meanwhile: refused as far as this read went
      }
      if (owner !== null && owner !== process.getuid?.()) {
        throw new LiveStatsError(pid, 'other-user', `pid ${pid}: another user's process (uid ${owner}): only that user or root may read its pool`);
      }
      throw new LiveStatsError(pid, 'unreadable', `pid ${pid}: the kernel refuses this process a look at it (/proc/${pid}/maps: ${code})`);
    }
    throw new LiveStatsError(pid, 'unreadable', `pid ${pid}: /proc/${pid}/maps: ${(error as Error).message}`);
  }
}

/** The page of `pid`: found in its maps, opened through /proc/PID/mem at its address (writable to ask for the table). */
function openPage(pid: number, writable: boolean): OpenPage {
  const maps = mapsOf(pid);
  const line = maps.split('\n').find((l) => l.includes(PAGE_NAME));
  if (line === undefined) {
    if (maps === '') throw exited(pid);
    if (!maps.includes(LIBRARY_NAME)) {
      throw new LiveStatsError(pid, 'not-under-library', `${named(pid)}: not under tensorpool (its preload library is not loaded: start it with 'tensorpool run -- ...')`);
    }
    throw new LiveStatsError(pid, 'not-made', `${named(pid)}: under tensorpool's library, but its pool is not made yet (no request of at least the threshold so far)`);
  }
  const base = parseInt(line.slice(0, line.indexOf('-')), 16);
  try {
    return { fd: fs.openSync(`/proc/${pid}/mem`, writable ? 'r+' : 'r'), base };
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ESRCH') throw exited(pid);
    if (code === 'EACCES' || code === 'EPERM') {
      throw new LiveStatsError(
        pid,
        'unreadable',
        `${named(pid)}: the kernel does not let this user read its memory (/proc/${pid}/mem: ${code}; Yama's ptrace_scope above 0, or a program that made itself undumpable): run tensorpool stats as root`,
      );
    }
    throw new LiveStatsError(pid, 'unreadable', `${named(pid)}: /proc/${pid}/mem: ${(error as Error).message}`);
  }
}

function readAt(page: OpenPage, offset: number, length: number): Buffer {
  const buffer = Buffer.alloc(length);
  const n = fs.readSync(page.fd, buffer, 0, length, page.base + offset);
  if (n !== length) throw new Error(`short read of the stats page (${n} of ${length} bytes at ${offset})`);
  return buffer;
}

function text(buffer: Buffer, offset: number, length: number): string {
  const bytes = buffer.subarray(offset, offset + length);
  const end = bytes.indexOf(0);
  return bytes.subarray(0, end < 0 ? length : end).toString('utf8');
}

/** A uint64 of the page as a number (counters stay far below 2^53). */
function u64(buffer: Buffer, offset: number): number {
  return Number(buffer.readBigUInt64LE(offset));
}

function layoutOf(pid: number, page: Buffer): PageLayout {
  if (page.subarray(0, 8).toString('latin1') !== MAGIC) throw new LiveStatsError(pid, 'unreadable', `${named(pid)}: its stats page is not one tensorpool wrote`);
  const version = page.readUInt32LE(8);
  if (version !== PAGE_VERSION) {
    throw new LiveStatsError(pid, 'other-version', `${named(pid)}: its stats page is of version ${version} (another tensorpool release); this one reads version ${PAGE_VERSION}`);
  }
  const at = (offset: number) => page.readUInt32LE(offset);
  return {
    pageBytes: at(12), directoryOffset: at(16), fieldCount: at(20), gaugesOffset: at(28), gaugesBytes: at(32), bucketsOffset: at(36),
    bucketCount: at(40), bucketBytes: at(44), rangesOffset: at(48), rangeCountOffset: at(52), rangeMax: at(56),
  };
}

/** The directory: each field's name, offset in the page, and kind (0: counter, 1: gauge). */
function directoryOf(page: Buffer, layout: PageLayout): { name: string; offset: number; kind: number }[] {
  const fields = [];
  for (let i = 0; i < layout.fieldCount; i++) {
    const at = layout.directoryOffset + 32 * i;
    fields.push({ name: text(page, at, 24), offset: page.readUInt32LE(at + 24), kind: page.readUInt32LE(at + 28) });
  }
  return fields;
}

/** The gauges block, whole: read between its two publication numbers until both agree (null: never published). */
function readGaugesBlock(page: OpenPage, layout: PageLayout): Buffer | null {
  for (let attempt = 0; attempt < 1000; attempt++) {
    const published = readAt(page, layout.gaugesOffset, 8).readBigUInt64LE(0);
    const block = readAt(page, layout.gaugesOffset, layout.gaugesBytes);
    const publishing = readAt(page, layout.gaugesOffset + layout.gaugesBytes - 8, 8).readBigUInt64LE(0);
    if (published === publishing) return published === 0n ? null : block;
  }
  return null;
}

/** CLOCK_MONOTONIC in ns, as the program's coarse clock reads it. */
function monotonicNs(): bigint {
  return process.hrtime.bigint();
}

function ageMs(publishedNs: bigint): number {
  const now = monotonicNs();
  return now > publishedNs ? Number((now - publishedNs) / 1000000n) : 0;
}

/** Bytes of [start, start + bytes) in RAM (present in the page tables), from /proc/PID/pagemap. */
function residentOf(pid: number, ranges: { start: number; bytes: number }[]): number | null {
  let fd: number;
  try {
    fd = fs.openSync(`/proc/${pid}/pagemap`, 'r');
  } catch {
    return null;
  }
  try {
    let resident = 0;
    const chunkPages = 1 << 17; // 1 MiB of entries a read
    const buffer = Buffer.alloc(chunkPages * 8);
    for (const { start, bytes } of ranges) {
      const first = Math.floor(start / PAGE_BYTES);
      const pages = Math.ceil((start + bytes) / PAGE_BYTES) - first;
      for (let done = 0; done < pages; done += chunkPages) {
        const count = Math.min(chunkPages, pages - done);
        const n = fs.readSync(fd, buffer, 0, count * 8, (first + done) * 8);
        for (let i = 0; i + 8 <= n; i += 8) if (buffer[i + 7] & 0x80) resident += PAGE_BYTES; // bit 63: present
      }
    }
    return resident;
  } catch {
    return null;
  } finally {
    fs.closeSync(fd);
  }
}

/** RSS, its peak, and page faults of `pid`. */
function processFigures(pid: number): Pick<LiveStats, 'rssBytes' | 'peakRssBytes' | 'minorFaults' | 'majorFaults'> {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (key: string) => Number(new RegExp(`^${key}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? 0) * 1024;
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  // The fields after the command (in parentheses, which may hold anything): state is field 3, minflt 10, majflt 12.
  const after = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return { rssBytes: kb('VmRSS'), peakRssBytes: kb('VmHWM'), minorFaults: Number(after[10 - 3]), majorFaults: Number(after[12 - 3]) };
}

/** The header's bySizeRequests: how many times readers asked for the table by size. */
const REQUESTS_OFFSET = 60;

/** Asks the program for the table by size: one added to the header's requests; returns the count asked for. */
function askForTable(page: OpenPage): bigint {
  const count = readAt(page, REQUESTS_OFFSET, 4).readUInt32LE(0);
  const next = Buffer.alloc(4);
  next.writeUInt32LE((count + 1) >>> 0);
  fs.writeSync(page.fd, next, 0, 4, page.base + REQUESTS_OFFSET);
  return BigInt((count + 1) >>> 0);
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function tableOf(block: Buffer, layout: PageLayout): SizeRow[] {
  const rows: SizeRow[] = [];
  const base = layout.bucketsOffset - layout.gaugesOffset;
  for (let k = 0; k < layout.bucketCount; k++) {
    const at = base + k * layout.bucketBytes;
    const row = { from: 2 ** k } as SizeRow;
    BUCKET_FIELDS.forEach((field, i) => (row[field] = u64(block, at + 8 * i)));
    if (row.liveBlocks || row.osBlocks || row.freeBlocks) rows.push(row);
  }
  return rows;
}

/**
 * Reads the pool of process `pid` now. Throws LiveStatsError, with a one-line message, for a process that is
 * gone, another user's, not under the library, or whose pool is not made yet.
 */
export async function readLiveStats(pid: number, options: ReadOptions = {}): Promise<LiveStats> {
  const open = openPage(pid, options.bySize === true);
  try {
    const page = readAt(open, 0, 4096);
    const layout = layoutOf(pid, page);
    let asked: bigint | null = options.bySize ? askForTable(open) : null;
    const full = readAt(open, 0, layout.pageBytes);
    const directory = directoryOf(full, layout);
    // The gauges first, then the counters: these are then at least as new as the publication.
    let block = readGaugesBlock(open, layout);
    let bySize: LiveStats['bySize'];
    if (asked !== null) {
      const deadline = Date.now() + (options.bySizeWaitMs ?? 5000);
      while (block === null || block.readBigUInt64LE(40) < asked) {
        if (Date.now() >= deadline) {
          asked = null;
          break;
        }
        await sleep(20);
        block = readGaugesBlock(open, layout);
      }
      bySize = asked !== null && block !== null ? { rows: tableOf(block, layout), ageMs: ageMs(block.readBigUInt64LE(32)) } : null;
    }
    // The counters, in a read that no update straddled (allocs - releases = liveBlocks), where one comes.
    let counters: Record<string, number> = {};
    let countersSettled = false;
    for (let attempt = 0; attempt < 64 && !countersSettled; attempt++) {
      const now = readAt(open, 0, layout.pageBytes);
      counters = Object.fromEntries(directory.filter((f) => f.kind === 0).map((f) => [f.name, u64(now, f.offset)]));
      countersSettled = counters.allocs - counters.releases === counters.liveBlocks;
    }
    const gauges =
      block === null ? null : Object.fromEntries(directory.filter((f) => f.kind === 1).map((f) => [f.name, u64(block, f.offset - layout.gaugesOffset)]));
    const ranges: { start: number; bytes: number }[] = [];
    if (block !== null) {
      const count = Math.min(u64(block, layout.rangeCountOffset - layout.gaugesOffset), layout.rangeMax);
      for (let i = 0; i < count; i++) {
        const at = layout.rangesOffset - layout.gaugesOffset + 16 * i;
        ranges.push({ start: u64(block, at), bytes: u64(block, at + 8) });
      }
    }
    const decayMs = full.readBigUInt64LE(80);
    const stats: LiveStats = {
      pid,
      command: commandOf(pid),
      mode: text(full, 88, 16),
      minBytes: u64(full, 72),
      decayMs: decayMs === 0xffffffffffffffffn ? null : Number(decayMs),
      planPath: text(full, 136, 1024) || null,
      recordPath: text(full, 1160, 1024) || null,
      version: text(full, 104, 32),
      counters,
      countersSettled,
      gauges,
      gaugesAgeMs: block === null ? null : ageMs(block.readBigUInt64LE(8)),
      opsSinceGauges: counters.allocs + counters.releases - (block === null ? 0 : u64(block, 16)),
      residentBytes: block === null ? null : residentOf(pid, ranges),
      ...processFigures(pid),
    };
    if (options.bySize) stats.bySize = bySize ?? null;
    return stats;
  } catch (error) {
    if (error instanceof LiveStatsError) throw error;
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') throw exited(pid);
    throw new LiveStatsError(pid, 'unreadable', `${named(pid)}: its stats page: ${(error as Error).message}`);
  } finally {
    fs.closeSync(open.fd);
  }
}

/** The processes under the library this user may read: those whose /proc/PID/maps names the page or the library. */
export function livePids(): number[] {
  const pids: number[] = [];
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      const maps = fs.readFileSync(`/proc/${entry}/maps`, 'utf8');
      if (maps.includes(PAGE_NAME) || maps.includes(LIBRARY_NAME)) pids.push(Number(entry));
    } catch {
      // another user's, or gone: not listed
    }
  }
  return pids.sort((a, b) => a - b);
}

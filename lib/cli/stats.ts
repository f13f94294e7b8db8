import { formatBytes, formatTable } from '../report/table.js';
import { commandOf, livePids, LiveStatsError, readLiveStats, type LiveStats, type LiveStatsFailure, type SizeRow } from '../process/live-stats.js';
import { CliError, parseCommand, usageError, withExamples, type Command, type Example } from './common.js';

const usage = `usage: tensorpool stats [PID] [--watch SECONDS] [--json] [--by-size]

The pool of a running process under tensorpool ('tensorpool run -- ...'), read while it runs: no signal,
not stopped, nothing asked of the program (it keeps a page of its counters in memory that its user, where
the kernel lets a user ptrace its own processes, and root may read). The counters are the pool's own, as
they are now, named as 'run --stats' and processPool().stats() name them; the arena's bytes and its idle
memory are as the program last published them (at most 0.1 s old while it allocates, marks iterations or
waits); the process's RSS, peak RSS and page faults, and the arena's resident bytes, are the kernel's now. Without PID: every process under tensorpool you may read.
  --watch SECONDS  again every SECONDS (such as 1 or 0.5) until the process ends (Ctrl-C stops)
  --json           as JSON, the keys as processPool().stats() has them (with --watch: one object a line)
  --by-size        also where the memory is: live and free blocks and spans by size (a power of two of
                   their capacity), worked out by the program when asked, at its next iteration mark,
                   decay turn, sleep or wait (up to 5 s); a program idle all that while gives none
A process that is not under tensorpool, that has ended, or that is another user's gets one line, and the
exit code 1.`;

const examples: Example[] = [
  { what: 'the processes under tensorpool you may read', command: 'tensorpool stats' },
  { what: "a service's pool, every second, until it exits", command: 'tensorpool stats 4242 --watch 1' },
  { what: 'where its memory is, by block size', command: 'tensorpool stats 4242 --by-size' },
  { what: 'one JSON object a second, for a dashboard', command: 'tensorpool stats 4242 --json --watch 1' },
];

const MODES: Record<string, string> = {
  default: 'default classes',
  planned: 'a plan',
  recording: 'recording',
  adaptive: 'adaptive',
};

function bytes(n: number | null | undefined): string {
  return n === null || n === undefined ? '-' : formatBytes(n);
}

function seconds(ms: number): string {
  return ms < 10000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.round(ms / 1000)} s`;
}

/** The live view as text: one line of what the process is, then the figures, named as `run --stats` names them. */
export function formatLiveStats(s: LiveStats): string {
  const c = s.counters;
  const g = s.gauges;
  const head =
    `pid ${s.pid} (${s.command}): tensorpool ${s.version}, ${MODES[s.mode] ?? s.mode}${s.planPath ? ` ${s.planPath}` : ''}, ` +
    `requests >= ${formatBytes(s.minBytes)}, decay ${s.decayMs === null ? 'off' : `${s.decayMs} ms`}${s.recordPath ? `, recording to ${s.recordPath}` : ''}`;
  const published = g === null ? 'not published yet' : `published ${seconds(s.gaugesAgeMs ?? 0)} ago, ${s.opsSinceGauges} allocs and releases since`;
  const lines = [
    head,
    `  process  RSS ${bytes(s.rssBytes)}, peak RSS ${bytes(s.peakRssBytes)}; page faults ${s.minorFaults} minor, ${s.majorFaults} major`,
    `  pool     allocs ${c.allocs}, releases ${c.releases}, hits ${c.hits}, borrows ${c.borrows}, grown ${c.grown}, ` +
      `OS fallbacks ${c.osFallbacks}, OS oversize ${c.osOversize}`,
    `  live     ${c.liveBlocks} blocks / ${bytes(c.bytesLive)} (peak ${bytes(c.peakBytesLive)}); of them mapped by the OS ${c.osLiveBlocks} / ${bytes(c.osLiveBytes)}`,
    `  arena    ${bytes(g?.arenaBytes)} carved, ${bytes(g?.committedBytes)} committed, ${bytes(g?.reservedBytes)} reserved; ` +
      `resident ${bytes(s.residentBytes)}, idle ${bytes(g?.idleBytes)} (${published})`,
    `  decay    decay and trim gave back ${bytes(c.purgedBytes)} in ${c.purgedBlocks} blocks and spans; re-faulted ${bytes(c.rewarmedBytes)}` +
      (c.movedToMappings ? `; realloc moved ${c.movedToMappings} blocks to mappings of their own` : ''),
    `  plan     iterations ${c.iterations}, switches ${c.switches}, generation ${c.generation}` +
      (c.scheduleHits + c.scheduleMisses > 0 ? `; schedule ${c.scheduleHits} hits, ${c.scheduleMisses} misses` : ''),
  ];
  if (!s.countersSettled) lines.push('  (the pool changed while it was read: each counter is whole, not all of them from one moment)');
  if (s.bySize !== undefined) lines.push(...bySizeLines(s.bySize));
  return lines.join('\n');
}

function sizeRange(from: number): string {
  return `${formatBytes(from)}-${formatBytes(2 * from)}`;
}

function bySizeLines(table: LiveStats['bySize']): string[] {
  if (!table) {
    return ['  by size  the program has not worked the table out since asked (it does at its next iteration mark, decay turn, sleep or wait, or JS stats() call)'];
  }
  const rows = table.rows.map((r: SizeRow) => [
    sizeRange(r.from), r.liveBlocks, bytes(r.liveBytes), r.osBlocks, bytes(r.osBytes), r.freeBlocks, bytes(r.idleBytes), bytes(r.givenBackBytes),
  ]);
  const headers = ['capacity', 'live', 'live bytes', 'OS', 'OS bytes', 'free', 'idle', 'given back'];
  return [`  by size (worked out ${seconds(table.ageMs)} ago)`, ...formatTable(headers, rows).split('\n').map((l) => `    ${l}`)];
}

/** The live view as JSON: the counters and gauges under processPool().stats()'s keys, beside the rest. */
export function liveStatsJson(s: LiveStats): Record<string, unknown> {
  const { counters, gauges, ...rest } = s;
  return { ...rest, ...counters, ...(gauges ?? {}) };
}

// What the list says of a process whose pool it cannot read.
const UNREAD: Record<LiveStatsFailure, string> = {
  gone: 'ended',
  'other-user': "another user's",
  'not-under-library': 'not under tensorpool',
  'not-made': 'pool not made yet',
  unreadable: 'unreadable',
  'other-version': 'another version',
};

function shortened(command: string): string {
  return command.length > 40 ? command.slice(0, 37) + '...' : command;
}

/** One row a process for the list: those whose pool cannot be read say why. */
async function listRows(): Promise<{ rows: (string | number)[][]; json: unknown[] }> {
  const rows: (string | number)[][] = [];
  const json: unknown[] = [];
  for (const pid of livePids()) {
    try {
      const s = await readLiveStats(pid);
      rows.push([pid, shortened(s.command), s.mode, s.counters.allocs, `${s.counters.liveBlocks} / ${bytes(s.counters.bytesLive)}`, bytes(s.gauges?.arenaBytes), bytes(s.gauges?.idleBytes), bytes(s.rssBytes)]);
      json.push(liveStatsJson(s));
    } catch (error) {
      if (!(error instanceof LiveStatsError) || error.reason === 'gone') continue;
      rows.push([pid, shortened(commandOf(pid)), UNREAD[error.reason], '-', '-', '-', '-', '-']);
      json.push({ pid, command: commandOf(pid), error: error.message });
    }
  }
  return { rows, json };
}

function parseSeconds(value: string | undefined): number | null {
  if (value === undefined) return null;
  const n = Number(value);
  if (!/^\d+(\.\d+)?$/.test(value) || !(n > 0) || n > 86400) throw new CliError(`--watch must be a number of seconds above 0 (such as 1 or 0.5), got ${JSON.stringify(value)}`);
  return n;
}

function parsePid(positionals: string[]): number | null {
  if (positionals.length === 0) return null;
  if (positionals.length > 1) throw usageError(`expected at most one PID, got ${positionals.join(' ')}`, usage);
  const pid = Number(positionals[0]);
  if (!/^\d+$/.test(positionals[0]) || !Number.isSafeInteger(pid) || pid < 1) throw new CliError(`PID must be a process id (a positive integer), got ${JSON.stringify(positionals[0])}`);
  return pid;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

export const statsCommand: Command = {
  name: 'stats',
  summary: "a running process's pool, read while it runs (--watch, --by-size)",
  usage,
  async run(argv) {
    const { values, flags, positionals } = parseCommand(argv, { watch: { type: 'string' }, json: { type: 'boolean' }, 'by-size': { type: 'boolean' } }, usage);
    if (flags.help) return void console.log(withExamples(usage, examples));
    const every = parseSeconds(values.watch);
    const pid = parsePid(positionals);
    if (pid === null && flags['by-size']) throw new CliError('--by-size needs a PID');
    // A watch piped into `head` ends when head does, as `watch`-like tools do, not with a stack trace.
    if (every !== null) process.stdout.on('error', (error: NodeJS.ErrnoException) => (error.code === 'EPIPE' ? process.exit(0) : undefined));
    for (let first = true; ; first = false) {
      if (!first) await sleep(every! * 1000);
      if (pid === null) {
        const { rows, json } = await listRows();
        if (flags.json) console.log(JSON.stringify(json, null, every === null ? 2 : undefined));
        else if (rows.length === 0) console.log('no process under tensorpool that you may read');
        else console.log(formatTable(['pid', 'command', 'mode', 'allocs', 'live', 'carved', 'idle', 'RSS'], rows));
      } else {
        let s: LiveStats;
        try {
          s = await readLiveStats(pid, { bySize: flags['by-size'] });
        } catch (error) {
          if (!(error instanceof LiveStatsError)) throw error;
          // Watching a process that ends is how a watch ends.
          if (!first && error.reason === 'gone') return void console.error(`tensorpool: ${error.message}`);
          throw new CliError(error.message, 1);
        }
        if (flags.json) console.log(JSON.stringify(liveStatsJson(s), null, every === null ? 2 : undefined));
        else console.log((first ? '' : '\n') + (every === null ? '' : `${new Date().toISOString()}\n`) + formatLiveStats(s));
      }
      if (every === null) return;
    }
  },
};

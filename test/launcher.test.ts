/**
 * `tensorpool run` is the program it runs: it execs the command, so the command keeps the caller's pid,
 * signals (ignored, blocked, and delivered to it alone), limits, descriptors and exit status. Tried by
 * programs that report what they were given, as `tensorpool` is started by users: through bin/tensorpool.
 */
import { describe, expect, it } from 'vitest';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';

import { native } from '../lib/native.js';

const bin = path.resolve(__dirname, '../bin/tensorpool');
const cli = path.resolve(__dirname, '../dist/cli/main.js');
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-launcher-'));
const python = spawnSync('python3', ['-c', '0']).status === 0;

/** Bit n-1 of a /proc/<pid>/status signal mask (hexadecimal) is signal n. */
function maskOf(status: string, field: 'SigIgn' | 'SigBlk'): bigint {
  const line = status.split('\n').find((l) => l.startsWith(`${field}:`));
  expect(line, status).toBeDefined();
  return BigInt(`0x${line!.split(/\s+/)[1]}`);
}
const bit = (signal: string): bigint => 1n << BigInt(os.constants.signals[signal as keyof typeof os.constants.signals] - 1);

/** `sh -c script` with `$TP` naming the tensorpool command: its stdout, stderr, exit code and signal. */
function shell(script: string, env: NodeJS.ProcessEnv = process.env) {
  const r = spawnSync('sh', ['-c', script], { encoding: 'utf8', env: { ...env, TP: bin }, timeout: 60_000 });
  return { out: r.stdout, err: r.stderr, code: r.status, signal: r.signal };
}

/** Lines a program prints, one at a time, as promises. */
function linesOf(child: ChildProcess): () => Promise<string> {
  const queue: string[] = [];
  const waiting: ((line: string) => void)[] = [];
  readline.createInterface({ input: child.stdout! }).on('line', (line) => {
    const next = waiting.shift();
    if (next) next(line);
    else queue.push(line);
  });
  return () => new Promise((resolve) => (queue.length ? resolve(queue.shift()!) : waiting.push(resolve)));
}

function ended(child: ChildProcess): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  return new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
}

describe('tensorpool run execs its command', () => {
  it('the command has the launcher pid and is the program, not Node', () => {
    const r = shell('echo $$; exec "$TP" run -- sh -c \'echo $$; readlink /proc/$$/exe\'');
    expect(r.code, r.err).toBe(0);
    const [caller, program, exe] = r.out.trim().split('\n');
    expect(program).toBe(caller);
    expect(path.basename(exe)).not.toMatch(/^node/);
  });

  it("signals the caller ignored stay ignored (nohup, a shell's trap ''), and no other", () => {
    const trapped = shell('trap \'\' INT TERM HUP; exec "$TP" run -- cat /proc/self/status');
    expect(trapped.code, trapped.err).toBe(0);
    const ignored = maskOf(trapped.out, 'SigIgn');
    for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) expect(ignored & bit(signal), signal).toBe(bit(signal));
    // Node ignores SIGPIPE and SIGXFSZ: the command must not (`yes | head` ends by SIGPIPE).
    expect(ignored & (bit('SIGPIPE') | bit('SIGXFSZ'))).toBe(0n);

    const nohup = shell('exec nohup "$TP" run -- cat /proc/self/status');
    expect(nohup.code, nohup.err).toBe(0);
    expect(maskOf(nohup.out, 'SigIgn')).toBe(bit('SIGHUP'));

    const plain = shell('exec "$TP" run -- cat /proc/self/status');
    expect(maskOf(plain.out, 'SigIgn')).toBe(0n);
    // Were SIGPIPE ignored, yes would see EPIPE and say so ("Broken pipe") instead of ending by the signal.
    const pipe = shell('exec "$TP" run -- sh -c \'yes | head -n 1 >/dev/null\'');
    expect(pipe).toMatchObject({ code: 0, err: '' });
  });

  it('signals the caller ignored are ignored from the first instant: none sent while the command is being prepared ends the run', async () => {
    // The launcher's shell is the process the caller started until it execs the command; Node, which resets
    // ignored signals as it starts, runs as its child, in a session of its own. Signals sent every few
    // milliseconds from the start reach the shell or the command, both ignoring them as the caller does.
    // Sent to the pid (a supervisor) and to the process group (a terminal's Ctrl-C), in turn.
    for (const group of [false, true]) {
      const child = spawn('sh', ['-c', `trap '' INT TERM HUP; echo trapped; exec "${bin}" run -- sh -c 'sleep 0.3; echo ran'`], { stdio: ['ignore', 'pipe', 'pipe'], detached: group });
      const next = linesOf(child);
      const exit = ended(child);
      expect(await next()).toBe('trapped'); // the caller's own trap is set: from here on, every signal is the test's
      const start = Date.now();
      while (Date.now() - start < 400 && child.exitCode === null) {
        for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
          try {
            process.kill(group ? -child.pid! : child.pid!, signal);
          } catch {
            // gone between the check and the signal
          }
        }
        await new Promise((resolve) => setTimeout(resolve, 3));
      }
      expect(await exit, group ? 'to the group' : 'to the pid').toEqual({ code: 0, signal: null });
      expect(await next()).toBe('ran');
    }
  });

  it('the command keeps the caller’s soft address-space limit, under which Node itself could not start', () => {
    const r = shell('ulimit -S -v 400000; exec "$TP" run -- sh -c \'ulimit -S -v\'');
    expect(r.code, r.err).toBe(0);
    expect(r.out.trim()).toBe('400000');
  });

  it('the command keeps soft limits of open files and stack under which the launcher could not work', () => {
    // (Node needs more than 32 KiB of stack; with any library preloaded, glibc's loader may need more than 16.)
    const r = shell('ulimit -S -n 12; ulimit -S -s 32; exec "$TP" run -- sh -c \'ulimit -S -n; ulimit -S -s\'');
    expect(r.code, r.err).toBe(0);
    expect(r.out.trim().split('\n')).toEqual(['12', '32']);
  });

  it('closed standard descriptors stay closed for the command, and the run goes on', () => {
    const closedOut = shell('exec "$TP" run -- sh -c \'echo to-stderr >&2; [ -e /proc/self/fd/1 ] || echo "1 closed" >&2\' >&-');
    expect(closedOut.code, closedOut.err).toBe(0);
    expect(closedOut.err).toBe('to-stderr\n1 closed\n');
    const allClosed = shell('"$TP" run -- sh -c \'for fd in 0 1 2; do [ -e /proc/self/fd/$fd ] || echo $fd >&9; done 9>"$0"\' "$OUT" <&- >&- 2>&-', { ...process.env, OUT: path.join(tmp, 'closed.txt') });
    expect(allClosed.code).toBe(0);
    expect(fs.readFileSync(path.join(tmp, 'closed.txt'), 'utf8')).toBe('0\n1\n2\n');
    // An error of run's own with stderr closed: the status says it.
    expect(shell('exec "$TP" run --no-such-option -- true 2>&-').code).toBe(2);
  });

  it.skipIf(spawnSync('script', ['--version']).status !== 0 || spawnSync('pgrep', ['--version']).status !== 0)(
    'a run in the background leaves the terminal’s modes as the program in the foreground set them',
    () => {
      // Node puts back, as it exits, the modes it found on a terminal it had as stdin, stdout or stderr: under a
      // pseudo-terminal (util-linux's script), the foreground program sets raw mode once the run in the
      // background has started Node, and reads its modes once Node has gone.
      const node = '[m]ain.js run -- sleep 3.25'; // ([m]: a pattern that does not find the shells that hold it)
      const foreground = `i=0; until pgrep -f "${node}" >/dev/null || [ $i -ge 300 ]; do i=$((i+1)); sleep 0.01; done; sleep 0.05; stty -icanon -echo; while pgrep -f "${node}" >/dev/null; do sleep 0.01; done; stty -a`;
      const r = shell(`script -qc 'stty sane; "$TP" run -- sleep 3.25 & ${foreground}; wait' /dev/null`);
      expect(r.code, r.err).toBe(0);
      expect(r.out).toMatch(/(^|\s)-icanon(\s|$)/m);
      expect(r.out).toMatch(/(^|\s)-echo(\s|$)/m);
    },
  );

  it('a -- among the command’s words is the command’s', () => {
    const r = shell('exec "$TP" run echo a -- b');
    expect(r.code, r.err).toBe(0);
    expect(r.out).toBe('a -- b\n');
  });

  it.skipIf(!python)('the signal mask is the caller’s: blocked signals stay blocked, and Node’s SIGUSR1 block is gone', () => {
    const blocked = spawnSync('python3', ['-c', `import os, signal, sys
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2, signal.SIGWINCH})
os.execv(sys.argv[1], [sys.argv[1], 'run', '--', 'cat', '/proc/self/status'])`, bin], { encoding: 'utf8' });
    expect(blocked.status, blocked.stderr).toBe(0);
    expect(maskOf(blocked.stdout, 'SigBlk')).toBe(bit('SIGUSR2') | bit('SIGWINCH'));
    const plain = shell('exec "$TP" run -- cat /proc/self/status');
    expect(maskOf(plain.out, 'SigBlk')).toBe(0n);
  });

  it('the soft limit of open files and the descriptors passed on are the caller’s', () => {
    const file = path.join(tmp, 'fd5.txt');
    const r = shell(`ulimit -S -n 512; exec 5>"${file}"; exec "$TP" run -- sh -c 'ulimit -S -n; echo through-5 >&5'`);
    expect(r.code, r.err).toBe(0);
    expect(r.out.trim()).toBe('512');
    expect(fs.readFileSync(file, 'utf8')).toBe('through-5\n');
    const closed = shell('exec "$TP" run -- sh -c \'[ -e /proc/$$/fd/0 ] && echo open || echo closed\' <&-');
    expect(closed.out.trim()).toBe('closed');
  });

  it('the exit status is the command’s, a signal included', () => {
    expect(shell('exec "$TP" run -- sh -c "exit 3"').code).toBe(3);
    const term = spawnSync(bin, ['run', '--', 'sh', '-c', 'kill -TERM $$'], { encoding: 'utf8' });
    expect(term.signal).toBe('SIGTERM');
    const int = spawnSync(bin, ['run', '--', 'sh', '-c', 'kill -INT $$'], { encoding: 'utf8' });
    expect(int.signal).toBe('SIGINT');
    if (python) {
      const segv = spawnSync(bin, ['run', '--', 'python3', '-c', 'import os, signal; os.kill(os.getpid(), signal.SIGSEGV)'], { encoding: 'utf8' });
      expect(segv.signal).toBe('SIGSEGV');
      // What Python's subprocess sees: -11, not 139.
      const seen = spawnSync('python3', ['-c', `import subprocess, sys
print(subprocess.run([sys.argv[1], 'run', '--', 'sh', '-c', 'kill -SEGV $$']).returncode)`, bin], { encoding: 'utf8' });
      expect(seen.stdout.trim()).toBe('-11');
    }
  });

  it.skipIf(!python)('a Ctrl-C to the process group reaches the program once; USR1, USR2, QUIT and WINCH reach it, and nothing opens an inspector', async () => {
    const program = `import signal, time
interrupts = []
def note(signum, frame):
    print(signal.Signals(signum).name, flush=True)
    if signum == signal.SIGINT:
        interrupts.append(signum)
for s in (signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGQUIT, signal.SIGWINCH):
    signal.signal(s, note)
print('ready', flush=True)
while not interrupts:
    time.sleep(0.05)
time.sleep(1.0)
print('count', len(interrupts), flush=True)
`;
    const child = spawn(bin, ['run', '--', 'python3', '-c', program], { detached: true, stdio: ['ignore', 'pipe', 'inherit'] });
    const next = linesOf(child);
    const exit = ended(child);
    expect(await next()).toBe('ready');
    expect(fs.readlinkSync(`/proc/${child.pid}/exe`)).toMatch(/python/);
    for (const signal of ['SIGUSR1', 'SIGUSR2', 'SIGQUIT', 'SIGWINCH'] as const) {
      process.kill(child.pid!, signal);
      expect(await next()).toBe(signal);
    }
    process.kill(-child.pid!, 'SIGINT'); // as the terminal does: the whole foreground group
    expect(await next()).toBe('SIGINT');
    expect(await next()).toBe('count 1'); // a second copy, forwarded by a parent, would have come within the second
    expect(await exit).toEqual({ code: 0, signal: null });
  });

  it('the caller’s NODE_OPTIONS runs in the command only, once', () => {
    const log = path.join(tmp, 'required.log');
    const required = path.join(tmp, 'side-effect.cjs');
    fs.writeFileSync(required, `require('fs').appendFileSync(${JSON.stringify(log)}, process.pid + '\\n');\n`);
    const r = spawnSync(bin, ['run', '--', process.execPath, '-e', 'console.log(process.pid)'], {
      encoding: 'utf8',
      env: { ...process.env, NODE_OPTIONS: `--require ${required}` },
    });
    expect(r.status, r.stderr).toBe(0);
    expect(fs.readFileSync(log, 'utf8')).toBe(`${r.stdout.trim()}\n`);
  });

  it('arguments and environment values reach the command byte for byte, those that are not UTF-8 too', () => {
    // Made by printf in the caller's shell (Node can pass no such bytes): e9 is not UTF-8, as in an old file name.
    const caller = [
      'name=$(printf "caf\\351"); printf contents > "$DIR/$name"',
      'V=$(printf "a\\351b") Q="x\'y" "$TP" run -- sh -c \'for w in "$V" "$Q" "$@"; do printf "<%s>" "$w"; done; cat "$3"\' \\',
      '  sh "$(printf "it\'s\\na\\377b")" "" "$DIR/$name"',
    ].join('\n');
    const r = spawnSync('sh', ['-c', caller], { env: { ...process.env, TP: bin, DIR: tmp } });
    expect(r.status, r.stderr.toString()).toBe(0);
    const latin1 = (text: string) => Buffer.from(text, 'latin1');
    const words = [latin1('a\xe9b'), latin1("x'y"), latin1("it's\na\xffb"), latin1(''), latin1(`${tmp}/caf\xe9`)];
    const expected = Buffer.concat([...words.map((w) => Buffer.concat([latin1('<'), w, latin1('>')])), latin1('contents')]);
    expect(r.stdout.toString('latin1')).toBe(expected.toString('latin1'));
  });

  it('the caller’s variables reach the command in its order, each as getenv() finds it, and those run extends keep their bytes', () => {
    // Names JavaScript objects order or treat apart (integers, __proto__), and a library path that is not UTF-8.
    const variables = [
      'PATH=/usr/bin:/bin',
      'ZED=1',
      '10=ten',
      '__proto__=x',
      '2=two',
      'LD_PRELOAD="$(printf "/nonexistent/l\\351.so")"',
      'A=last',
    ].join(' ');
    const r = spawnSync('sh', ['-c', `env -i ${variables} "$TP" run --no-hooks -- /usr/bin/env -0 2>/dev/null`], { env: { ...process.env, TP: bin } });
    expect(r.status, r.stderr.toString()).toBe(0);
    const entries = r.stdout
      .toString('latin1')
      .split('\0')
      .filter((e) => e && !e.startsWith('TENSORPOOL_'));
    const preload = entries.find((e) => e.startsWith('LD_PRELOAD='))!;
    expect(entries.map((e) => e.split('=')[0])).toEqual(['PATH', 'ZED', '10', '__proto__', '2', 'LD_PRELOAD', 'A']);
    expect(preload.endsWith(':/nonexistent/l\xe9.so')).toBe(true);
  });

  it('started as node main.js, the command still gets the default SIGPIPE and an empty mask', () => {
    const r = spawnSync(process.execPath, [cli, 'run', '--', 'cat', '/proc/self/status'], { encoding: 'utf8' });
    expect(r.status, r.stderr).toBe(0);
    expect(maskOf(r.stdout, 'SigIgn')).toBe(0n);
    expect(maskOf(r.stdout, 'SigBlk')).toBe(0n);
  });

  it('a command that cannot be run fails as a shell would, with one line', () => {
    const missing = spawnSync(bin, ['run', '--', 'no-such-command-tp'], { encoding: 'utf8' });
    expect(missing.status).toBe(127);
    expect(missing.stderr).toBe('tensorpool: cannot run no-such-command-tp: command not found\n');
    const notExecutable = path.join(tmp, 'data.txt');
    fs.writeFileSync(notExecutable, 'x');
    const denied = spawnSync(bin, ['run', '--', notExecutable], { encoding: 'utf8' });
    expect(denied.status).toBe(126);
    expect(denied.stderr.trim().split('\n')).toHaveLength(1);
    // A recording file that is a device: one line, not the whole usage.
    const device = spawnSync(bin, ['run', '--record', '/dev/full', '--', 'true'], { encoding: 'utf8' });
    expect(device.status).toBe(2);
    expect(device.stderr).toBe('tensorpool: --record /dev/full: not a regular file (a recording is written to a regular file)\n');
    const script = path.join(tmp, 'no-shebang');
    fs.writeFileSync(script, 'echo from-sh\n', { mode: 0o755 });
    const noShebang = spawnSync(bin, ['run', '--', script], { encoding: 'utf8' });
    expect(noShebang.stdout).toBe('from-sh\n');
  });

  it("the preload library's options table is run's grammar, its --help and the guide's environment table", () => {
    const table = native.preloadOptions();
    expect(table.map((o) => o.name)).toContain('TENSORPOOL_MIN_BYTES');
    const help = spawnSync(process.execPath, [cli, 'run', '--help'], { encoding: 'utf8' }).stdout;
    const guide = fs.readFileSync(path.resolve(__dirname, '../docs/process-allocator.md'), 'utf8');
    for (const option of table) {
      expect(help, option.name).toContain(`  ${option.name}\n      ${option.help}`);
      expect(guide, option.name).toMatch(new RegExp(`\\| \`${option.name}(=[01])?\` \\|`));
    }
    // One grammar: what the library refuses, run refuses, and what it takes, run passes on as written.
    expect(native.checkPreloadOption('TENSORPOOL_MIN_BYTES', '64KiB')).toBeNull();
    expect(native.checkPreloadOption('TENSORPOOL_DECAY_MS', 'soon')).toMatch(/^TENSORPOOL_DECAY_MS=soon is not a number of milliseconds/);
    const refused = spawnSync(bin, ['run', '--min-bytes', '12 apples', '--', 'true'], { encoding: 'utf8' });
    expect(refused.status).toBe(2);
    expect(refused.stderr).toBe('tensorpool: --min-bytes must be a byte count from 64K to 2^47 (such as 64K), got "12 apples"\n');
    // Below the pool's floor: refused by both, the floor named (the tests' TENSORPOOL_TEST_MIN_BYTES takes it).
    expect(native.checkPreloadOption('TENSORPOOL_MIN_BYTES', '65535')).toMatch(/^TENSORPOOL_MIN_BYTES=65535 is below the pool's floor, 64K/);
    expect(native.checkPreloadOption('TENSORPOOL_TEST_MIN_BYTES', '1')).toBeNull();
    const small = spawnSync(bin, ['run', '--min-bytes', '4K', '--', 'true'], { encoding: 'utf8' });
    expect(small.status).toBe(2);
    expect(small.stderr).toBe("tensorpool: --min-bytes 4K is below the pool's floor, 64K (its span size; smaller requests are the C library's)\n");
    const taken = spawnSync(bin, ['run', '--min-bytes', '1M', '--decay', 'off', '--', 'sh', '-c', 'echo $TENSORPOOL_MIN_BYTES $TENSORPOOL_DECAY_MS'], { encoding: 'utf8' });
    expect(taken.stdout).toBe('1M off\n');
  });
});

// The preload library in a program that goes quiet or counts its threads: test/preload/quiet.c, built with the
// system's C compiler, run with and without the library (the process allocator's other tests: preload.test.ts).
import { describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { preloadLibrary } from '../lib/index.js';
import { run } from './helpers.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-preload-quiet-'));

describe('a program that goes quiet or counts its threads (test/preload/quiet.c, run with and without the library)', () => {
  const program = path.join(tmp, 'quiet');
  const built = spawnSync('cc', ['-O1', '-w', '-pthread', '-o', program, path.resolve(__dirname, 'preload/quiet.c')], { encoding: 'utf8' });
  // SIGKILL at the timeout: a process whose only thread left blocks every signal (the library's) outlives SIGTERM.
  const quiet = (task: string, env: NodeJS.ProcessEnv = {}, ...args: string[]) => {
    const r = spawnSync(program, [task, ...args], { encoding: 'utf8', env: { ...process.env, ...env }, timeout: 60_000, killSignal: 'SIGKILL' });
    return { out: r.stdout.trim(), err: r.stderr, signal: r.signal, code: r.status };
  };
  const preloaded = (task: string, env: NodeJS.ProcessEnv = {}, ...args: string[]) => quiet(task, { LD_PRELOAD: preloadLibrary, ...env }, ...args);

  it('is built', () => {
    expect(built.status, built.stderr).toBe(0);
  });

  // Decay ran only on the program's calls: a program that freed its blocks and went quiet kept them (a
  // Python script that freed 400 MB of strings and slept held 411 MB, glibc 8 MB).
  it('memory a program freed goes back while it makes no call at all, in a forked child too', () => {
    for (const task of ['idle', 'fork-idle']) {
      expect(quiet(task).out).toBe('resident memory back within 16 MiB of the start while quiet: yes');
      const ours = preloaded(task, { TENSORPOOL_DECAY_MS: '100' });
      expect(ours.code, ours.err).toBe(0);
      expect(ours.out, task).toBe('resident memory back within 16 MiB of the start while quiet: yes');
    }
    // The thread that does it, turned off: the memory waits for the program's next call.
    expect(preloaded('idle', { TENSORPOOL_DECAY_MS: '100', TENSORPOOL_DECAY_THREAD: '0' }, '2').out).toBe(
      'resident memory back within 16 MiB of the start while quiet: no');
  });

  // A program with one thread gets no decay thread (it would turn glibc's single-threaded paths off for good):
  // what it freed waited for its next call. A Python script that freed 400 MB and slept held them (glibc 13 MB).
  it('memory a program with one thread freed goes back before it sleeps for longer than the decay period', () => {
    const back = 'resident memory back within 16 MiB of the start after the sleep: yes';
    for (const call of ['nanosleep', 'clock_nanosleep', 'clock_nanosleep-abs', 'usleep', 'sleep', 'select', 'poll']) {
      expect(quiet('sleeps', {}, call).out, call).toBe(back);
      const ours = preloaded('sleeps', { TENSORPOOL_DECAY_MS: '100' }, call);
      expect(ours.code, ours.err).toBe(0);
      expect(ours.out, call).toBe(back);
    }
    // A sleep shorter than the period keeps it for the program's next use, as decay would.
    expect(preloaded('sleeps', { TENSORPOOL_DECAY_MS: '5000' }, 'nanosleep').out).toMatch(/sleep: no$/);
    // Short sleeps, or waits that time out, one after another are quiet too: decay takes its turn after each
    // (20 of 50 ms against a period of 100 ms), as its thread would have meanwhile.
    for (const call of ['short-nanosleeps', 'short-polls']) {
      expect(quiet('sleeps', {}, call).out, call).toBe(back);
      expect(preloaded('sleeps', { TENSORPOOL_DECAY_MS: '100' }, call).out, call).toBe(back);
      expect(preloaded('sleeps', { TENSORPOOL_DECAY_MS: '5000' }, call).out, call).toMatch(/sleep: no$/);
    }
    // In a signal handler the pool is left alone: the handler may have interrupted glibc's malloc.
    expect(quiet('sleeps', {}, 'handler').out).toBe(back);
    expect(preloaded('sleeps', { TENSORPOOL_DECAY_MS: '100' }, 'handler').out).toMatch(/sleep: no$/);
  });

  // Nor while it waits on descriptors (a server with one thread between requests, Python's selectors and
  // asyncio): a wait that lasts the decay period gives decay its turn, and the wait goes on as asked.
  it('memory a program with one thread freed goes back while it waits on descriptors for longer than the decay period', () => {
    const ready = 'ready: 1; resident memory back within 16 MiB of the start: yes';
    const timedOut = 'timed out: 0; after 1 s at least: yes; resident memory back: yes';
    const atOnce = 'a byte there before the wait: 1'; // found by the first call, with no timeout
    for (const call of ['poll', '__poll_chk', 'ppoll', 'select', 'pselect', 'epoll_wait', 'epoll_pwait']) {
      expect(quiet('waits', {}, call).out, call).toBe(`${ready}\n${timedOut}\n${atOnce}`);
      const ours = preloaded('waits', { TENSORPOOL_DECAY_MS: '100' }, call);
      expect(ours.code, ours.err).toBe(0);
      expect(ours.out, call).toBe(`${ready}\n${timedOut}\n${atOnce}`);
    }
    // A descriptor ready before the period ends the wait with the memory kept, as an event loop busy with
    // requests keeps it; the wait that times out is whole too.
    const busy = preloaded('waits', { TENSORPOOL_DECAY_MS: '5000' }, 'epoll_wait', '600');
    expect(busy.out).toBe(`ready: 1; resident memory back within 16 MiB of the start: no\ntimed out: 0; after 1 s at least: yes; resident memory back: no\n${atOnce}`);
  });

  // A signal that comes while decay has its turn between the two parts of a wait must still end the wait, as
  // it would have ended the whole one: an alarm of 1 s set before a wait arrives with the end of a first part
  // of 1 s (the default period). Taken between the two calls, it left epoll_wait waiting its 10 s out.
  it('a wait on descriptors split for decay still ends at a signal, as under glibc', () => {
    const ended = 'ended by the alarm (EINTR) within 5 s: yes; handler ran: yes';
    for (const call of ['poll', 'ppoll', 'select', 'pselect', 'epoll_wait', 'epoll_pwait']) {
      expect(quiet('waits-signal', {}, call).out, call).toBe(ended);
      const ours = preloaded('waits-signal', { TENSORPOOL_DECAY_MS: '1000' }, call);
      expect(ours.code, ours.err).toBe(0);
      expect(ours.out, call).toBe(ended);
    }
  });

  it("the library's thread exists only while the pool holds memory, and never in a program that made no thread", () => {
    const ours = preloaded('threads', { TENSORPOOL_DECAY_MS: '100' });
    expect(ours.code, ours.err).toBe(0);
    expect(ours.out).toBe('threads at start: 1; after the block was freed: 1\nthreads while the block was live: 2');
    expect(quiet('threads').out).toBe('threads at start: 1; after the block was freed: 1\nthreads while the block was live: 1');
    expect(preloaded('threads', { TENSORPOOL_DECAY_THREAD: '0' }).out).toMatch(/while the block was live: 1$/);
    expect(run('run', '--no-decay-thread', '--', program, 'threads').stdout).toMatch(/while the block was live: 1\n$/);
    expect(run('run', '--', program, 'threads').stdout).toMatch(/while the block was live: 2\n$/);
    // A first thread turns glibc's single-threaded paths off for good (glibc's tst-mallocfork2, which forks
    // from signal handlers while it allocates, hung): a single-threaded program keeps them.
    expect(preloaded('single-threads', { TENSORPOOL_DECAY_MS: '100' }).out).toBe(quiet('single-threads').out);
  });

  // The thread starts, parks, wakes and ends as four threads allocate with pauses and fork: one at most.
  it("the library's thread under threads that allocate, pause and fork: one at most, gone after, the memory back", () => {
    const glibc = quiet('churn', {}, '3');
    const pattern = /^blocks intact: yes; threads at most: (\d+); after: 1; resident memory back: yes$/;
    expect(glibc.out).toMatch(pattern);
    const ours = preloaded('churn', { TENSORPOOL_DECAY_MS: '20' }, '3');
    expect(ours.code, ours.err).toBe(0);
    expect(ours.out).toMatch(pattern);
    expect(Number(pattern.exec(ours.out)![1])).toBeLessThanOrEqual(Number(pattern.exec(glibc.out)![1]) + 1);
  });

  // A child forked from a thread the program made ends when that thread returns from its start routine, as
  // the process's last thread (CPython's test_threading forks so): with the library's thread, it lived on.
  it('a child forked from a thread the program made ends as that thread returns', () => {
    expect(quiet('fork-thread').out).toBe('a child forked from a thread ends as that thread returns: yes');
    const ours = preloaded('fork-thread', { TENSORPOOL_DECAY_MS: '100' });
    expect(ours.code, ours.err).toBe(0);
    expect(ours.out).toBe('a child forked from a thread ends as that thread returns: yes');
  });

  // The kernel refuses unshare(CLONE_NEWUSER) to a process with more than one thread (EINVAL).
  it("unshare(CLONE_NEWUSER) answers as under glibc while the pool holds a block and the library's thread runs", () => {
    const glibc = quiet('unshare');
    expect(glibc.out).toMatch(/^unshare\(CLONE_NEWUSER\): /);
    const ours = preloaded('unshare');
    expect(ours.code, ours.err).toBe(0);
    expect(ours.out).toBe(glibc.out);
  });

  // A process lives while any of its threads does: the library's, waiting for the next free(), kept one
  // whose main thread had called pthread_exit() alive once the program's last thread returned.
  it("ends when the program's last thread does, after pthread_exit() on the main thread", () => {
    const ours = preloaded('main-exit');
    expect(ours.signal, 'the process outlived its threads').toBeNull();
    expect(ours.code).toBe(0);
    expect(ours.out).toBe('main thread exiting');
  });

  it('ends when the program\'s last thread does, after pthread_cancel() of the main thread', () => {
    const ours = preloaded('main-cancel');
    expect(ours.signal, 'the process outlived its threads').toBeNull();
    expect(ours.code).toBe(0);
    expect(ours.out).toBe('main thread waiting');
  });

  // A signal the program's threads block goes to a thread that does not: the library's would have taken
  // SIGUSR1, whose default action ends the process, before the program's sigtimedwait.
  it("a signal the program's threads block is left to the program (sigtimedwait), as under glibc", () => {
    expect(quiet('signals').out).toBe('SIGUSR1 taken by sigtimedwait 100 times of 100');
    const ours = preloaded('signals');
    expect(ours.signal, ours.err).toBeNull();
    expect(ours.out).toBe('SIGUSR1 taken by sigtimedwait 100 times of 100');
  });
});

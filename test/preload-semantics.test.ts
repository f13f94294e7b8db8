// The preload library against glibc's own answers: test/preload/semantics.c, built with the system's C compiler,
// run with and without the library (the process allocator's other tests: preload.test.ts).
import { describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { preloadLibrary, readTrace } from '../lib/index.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-preload-semantics-'));

describe("glibc's answers (test/preload/semantics.c, built with the system's C compiler, run with and without the library)", () => {
  const program = path.join(tmp, 'semantics');
  const built = spawnSync('cc', ['-O1', '-fno-builtin', '-w', '-o', program, path.resolve(__dirname, 'preload/semantics.c')], { encoding: 'utf8' });
  // LIBC_FATAL_STDERR_: glibc's abort messages on stderr, not on the terminal.
  const semantics = (task: string, env: NodeJS.ProcessEnv = {}) => {
    const r = spawnSync(program, [task], { encoding: 'utf8', env: { ...process.env, LIBC_FATAL_STDERR_: '1', ...env }, timeout: 60_000 });
    return { out: r.stdout, err: r.stderr, signal: r.signal, code: r.status };
  };
  const preloaded = (task: string, env: NodeJS.ProcessEnv = {}) => semantics(task, { LD_PRELOAD: preloadLibrary, ...env });
  // The task's output matched by `pattern` (trimmed), alone and under the library: glibc's match, then ours.
  const bothMatch = (task: string, pattern: RegExp): [RegExpExecArray, RegExpExecArray] => {
    const glibc = pattern.exec(semantics(task).out.trim());
    expect(glibc, task).not.toBeNull();
    const ours = preloaded(task);
    const got = pattern.exec(ours.out.trim());
    expect(got, ours.out + ours.err).not.toBeNull();
    return [glibc!, got!];
  };

  it('is built', () => {
    expect(built.status, built.stderr).toBe(0);
  });

  it('a request the machine cannot commit (twice RAM + swap, 64 TiB): NULL and ENOMEM from every entry point, as glibc', () => {
    const glibc = semantics('oom');
    expect(glibc.code).toBe(0);
    expect(glibc.out.split('\n').length).toBeGreaterThan(15);
    for (const threshold of ['64K', '1']) {
      const ours = preloaded('oom', { TENSORPOOL_TEST_MIN_BYTES: threshold });
      expect(ours.code, ours.err).toBe(0);
      expect(ours.out).toBe(glibc.out);
    }
  });

  it('calloc of fresh memory writes nothing: calloc(1 GiB) is zero and not resident, as glibc', () => {
    const ours = preloaded('calloc');
    expect(ours.out).toBe(semantics('calloc').out);
    expect(ours.out.trim()).toBe('calloc(1 GiB): zero, resident below 64 MiB');
  });

  it('malloc_trim(0) gives the pool\'s free memory back at once, as glibc gives its own: resident memory falls, and it returns 1', () => {
    // Decay off: only malloc_trim gives anything back.
    const ours = preloaded('trim', { TENSORPOOL_DECAY_MS: 'off' });
    expect(ours.code, ours.err).toBe(0);
    const [resident, returned] = ours.out.trim().split('\n');
    expect(resident).toBe(semantics('trim').out.split('\n')[0]);
    expect(resident).toBe('48 MiB freed, then malloc_trim(0): resident within 16 MiB of before');
    expect(returned).toBe('malloc_trim(0) returned 1');
  });

  it('realloc grows a pool block in place where its capacity allows: bytes intact, moved a fraction of the times', () => {
    const ours = preloaded('realloc-grow');
    const moved = /bytes intact; moved (\d+) times in 768 reallocs/.exec(ours.out);
    expect(moved, ours.out + ours.err).not.toBeNull();
    // Four size classes per doubling: a block holds a quarter more than asked at most, so growth of
    // 1 KiB steps from 256 KiB to 1 MiB moves a few dozen times (every time before).
    expect(Number(moved![1])).toBeLessThan(100);
  });

  it('a buffer grown by realloc in steps of 1 MiB moves about once each time it doubles, as under glibc', () => {
    const runs = { glibc: semantics('realloc-steps'), library: preloaded('realloc-steps') };
    for (const [name, run] of Object.entries(runs)) {
      const moved = /^bytes intact; moved (\d+) times in 511 reallocs$/.exec(run.out.trim());
      expect(moved, `${name}: ${run.out}${run.err}`).not.toBeNull();
      // Doubling from 1 MiB to 512 MiB: 9 times, more where the space below is taken (here glibc's moved 9
      // times, the library's 4; 225 before its mappings grew past their last 2 MiB granule in place).
      expect(Number(moved![1]), name).toBeLessThan(48);
    }
  });

  it('realloc of a block past every class resizes its mapping: never two copies at once, bytes intact, as glibc', () => {
    const pattern = /^bytes intact; peak resident growth (\d+\.\d+) x the largest size$/;
    const glibc = pattern.exec(semantics('realloc-large').out.trim());
    const ours = preloaded('realloc-large');
    const growth = pattern.exec(ours.out.trim());
    expect(glibc).not.toBeNull();
    expect(growth, ours.out + ours.err).not.toBeNull();
    // glibc mremaps its mapped chunks: ~1.00. Copied into a new mapping at every step: ~1.98.
    expect(Number(growth![1])).toBeLessThan(1.25);
  });

  it('realloc of an arena block that cannot grow in place never holds two copies of a large buffer, as glibc', () => {
    const pattern = /^bytes intact; peak resident growth (\d+\.\d+) x the largest size$/;
    const glibc = pattern.exec(semantics('realloc-arena').out.trim());
    expect(glibc).not.toBeNull();
    // glibc mremaps its mapped chunk: ~1.0. A span copied beside the old one at every step: ~1.8 with the
    // default decay (the old one's pages given back once copied), ~9 with decay off (every old one kept).
    const ours = preloaded('realloc-arena', { TENSORPOOL_DECAY_MS: '1000' });
    const growth = pattern.exec(ours.out.trim());
    expect(growth, ours.out + ours.err).not.toBeNull();
    expect(Number(growth![1])).toBeLessThan(1.5);
    // Decay off keeps the free spans the buffer left while small (below the size it moves to a mapping at),
    // never a copy of it once large.
    const kept = pattern.exec(preloaded('realloc-arena', { TENSORPOOL_DECAY_MS: 'off' }).out.trim());
    expect(kept).not.toBeNull();
    expect(Number(kept![1])).toBeLessThan(2.5);
  });

  // glibc alone serves 1 MiB blocks from what 1,000-byte blocks freed; the pool cannot, so glibc gives its
  // free pages back once the pool takes new memory (82 MiB, twice glibc's peak, before). And glibc gives the
  // top of its heap back past a trim threshold that only blocks it would have mapped raise (a fixed 64 MiB
  // kept all 40 MiB of 2,000-byte blocks resident after they were freed).
  it('holds no more than glibc when small blocks are freed and large ones follow', () => {
    const pattern = /^resident after the small blocks (\d+) MiB, peak (\d+) MiB$/;
    for (const task of ['small-then-large', 'small-freed']) {
      const [glibc, got] = bothMatch(task, pattern);
      // The library's own pages and its first MiB of pool memory: a few MiB at most.
      expect(Number(got[1]), task).toBeLessThanOrEqual(Number(glibc[1]) + 4);
      expect(Number(got[2]), task).toBeLessThanOrEqual(Number(glibc[2]) + 4);
    }
  });

  // glibc grows the buffer into the 40 MiB its small blocks freed; the pool moves it into a mapping of its own
  // past 1 MiB, fresh memory for which glibc's free pages must go back as for the pool's other fresh memory
  // (74 MiB against glibc's 41 when the move did not count).
  it('holds no more than glibc when small blocks are freed and a buffer grows by realloc into a mapping', () => {
    const [glibc, got] = bothMatch('small-then-realloc', /^bytes intact; peak (\d+) MiB$/);
    expect(Number(got[1])).toBeLessThanOrEqual(Number(glibc[1]) + 4);
  });

  // glibc unmaps 1 MiB blocks at free; the pool kept them until decay, which the small blocks' mallocs never
  // gave a turn: 82 MiB against glibc's 41, right after the frees or 1.5 s later. The pool's free spans now
  // give back as much as glibc's heap grows past the highest it was.
  it('holds no more than glibc when large blocks are freed and small ones follow, kept', () => {
    for (const task of ['large-freed-then-small', 'large-freed-pause-small']) {
      const [glibc, got] = bothMatch(task, /^peak (\d+) MiB$/);
      expect(Number(got[1]), task).toBeLessThanOrEqual(Number(glibc[1]) + 4);
    }
  });

  // ...and only as much as it grows past the highest it was: a loop whose heap gives back and grows again to
  // the same height every iteration never costs the pool its memory (given back whenever the heap grew, the
  // pool's spans were faulted in again every iteration: 1,749 faults an iteration, 4,979 given back whole).
  it('a loop whose glibc heap grows back to the same height keeps the pool\'s memory resident', () => {
    const pattern = /^minor faults per iteration (\d+)$/;
    const ours = preloaded('steady-loop');
    const got = pattern.exec(ours.out.trim());
    expect(got, ours.out + ours.err).not.toBeNull();
    // glibc's own 4 MiB of small blocks, given back and faulted in again: 1,024 pages at most.
    expect(Number(got![1])).toBeLessThan(1280);
  });

  it('mallinfo2 and mallinfo count the blocks the pool serves, as glibc counts its own', () => {
    expect(semantics('mallinfo').out.trim()).toBe('mallinfo2 counts the blocks: yes; mallinfo: yes');
    expect(preloaded('mallinfo').out.trim()).toBe('mallinfo2 counts the blocks: yes; mallinfo: yes');
  });

  // The pool's decay ran only on the pool's own calls: a program that went on with small blocks alone held
  // its 40 MiB of freed 1 MiB blocks to the end (glibc unmaps or trims them at once).
  it('gives the memory of freed large blocks back while the program goes on with small ones only', () => {
    const pattern = /^resident after 3 s of small blocks (\d+) MiB$/;
    const glibc = pattern.exec(semantics('large-then-small').out.trim());
    expect(glibc).not.toBeNull();
    const ours = preloaded('large-then-small', { TENSORPOOL_DECAY_MS: '100' });
    const got = pattern.exec(ours.out.trim());
    expect(got, ours.out + ours.err).not.toBeNull();
    expect(Number(got![1])).toBeLessThanOrEqual(Number(glibc![1]) + 8);
  });

  it('blocks realloc\'d to sizes drawn at random take no more page faults than about glibc\'s', () => {
    const pattern = /^bytes intact; minor faults (\d+)$/;
    const glibc = pattern.exec(semantics('realloc-random').out.trim());
    expect(glibc).not.toBeNull();
    // The pool gave the memory a realloc left back at once, and a block realloc had moved into a mapping of
    // its own was unmapped once freed, its next one mapped and faulted in afresh: 3.5x glibc's faults.
    const ours = preloaded('realloc-random', { TENSORPOOL_DECAY_MS: '1000' });
    const faults = pattern.exec(ours.out.trim());
    expect(faults, ours.out + ours.err).not.toBeNull();
    expect(Number(faults![1])).toBeLessThan(1.5 * Number(glibc![1]));
  });

  it('malloc_usable_size of a C-library block is the C library\'s, even with another allocator preloaded after the library', () => {
    const jemalloc = ['/usr/lib/x86_64-linux-gnu/libjemalloc.so.2', '/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4'].find((f) => fs.existsSync(f));
    const after = jemalloc ? `${preloadLibrary}:${jemalloc}` : preloadLibrary;
    const ours = semantics('usable-size', { LD_PRELOAD: after });
    expect(ours.signal, ours.err).toBeNull();
    expect(ours.out.trim()).toBe('malloc_usable_size(malloc(100)) >= 100: yes');
  });

  // Each allocator preloaded after the library serves, measures and frees what is below the threshold, as it
  // does without the library: the same usable sizes (glibc's debug library with MALLOC_CHECK_=3 answers the
  // exact size asked, glibc's tst-malloc-usable), no crash. The library called glibc's malloc directly and
  // sent the debug library, jemalloc and the rest nothing (tcmalloc and mimalloc: SIGSEGV).
  const multiarch = spawnSync('cc', ['-print-multiarch'], { encoding: 'utf8' }).stdout.trim();
  const libdir = `/usr/lib/${multiarch || 'x86_64-linux-gnu'}`;
  const peers = [
    { name: "glibc's debug library", file: 'libc_malloc_debug.so.0', env: { MALLOC_CHECK_: '3' }, aligned: true },
    { name: 'jemalloc', file: 'libjemalloc.so.2', env: {}, aligned: true },
    { name: 'tcmalloc', file: 'libtcmalloc_minimal.so.4', env: {}, aligned: true },
    // (its usable size of an aligned block depends on where the block landed: those lines are left out)
    { name: 'mimalloc', file: 'libmimalloc.so.2', env: {}, aligned: false },
  ];
  for (const peer of peers) {
    const file = path.join(libdir, peer.file);
    const absent = fs.existsSync(file) ? '' : ` (skipped: ${file} is not installed)`;
    it.skipIf(absent !== '')(`below the threshold, the allocator next in the chain serves: ${peer.name} preloaded after the library${absent}`, () => {
      const keep = (out: string) => (peer.aligned ? out : out.split('\n').filter((l) => !l.includes('aligned:')).join('\n'));
      const alone = semantics('chain', { LD_PRELOAD: file, ...peer.env });
      expect(alone.code, alone.err).toBe(0);
      const chained = semantics('chain', { LD_PRELOAD: `${preloadLibrary}:${file}`, ...peer.env });
      expect(chained.signal, chained.err).toBeNull();
      expect(chained.code, chained.err).toBe(0);
      expect(keep(chained.out)).toBe(keep(alone.out));
      expect(chained.out).toMatch(/realloc across the threshold and back: intact/);
      // (posix_memalign(16, 1) took the next allocator's malloc(1): 8-byte aligned under jemalloc, tcmalloc, mimalloc)
      expect(chained.out).toMatch(/aligned requests of 0 to 64 bytes at 16 to 4096: 0 misaligned/);
    });
  }

  // tensorpool run --with NAME puts the peer after the library in LD_PRELOAD: the same chain as above, named.
  it('run --with jemalloc|mimalloc|tcmalloc chains the named allocator below the threshold, or says in one line which package is missing', () => {
    const cli = path.resolve(__dirname, '../dist/cli/main.js');
    for (const [name, file] of [['jemalloc', 'libjemalloc.so.2'], ['mimalloc', 'libmimalloc.so.2'], ['tcmalloc', 'libtcmalloc_minimal.so.4']]) {
      const r = spawnSync(process.execPath, [cli, 'run', '--stats', '--with', name, '--', program, 'chain'], { encoding: 'utf8', timeout: 60_000 });
      if (!fs.existsSync(path.join(libdir, file))) {
        expect(r.status).toBe(2);
        expect(r.stderr).toMatch(new RegExp(`^tensorpool: --with ${name}: ${file.replace(/\./g, '\\.')} is not installed \\(on Debian: apt-get install lib`));
        continue;
      }
      expect(r.status, r.stderr).toBe(0);
      expect(r.stdout).toMatch(/realloc across the threshold and back: intact/);
      expect(r.stderr).toMatch(/^tensorpool: process pool \(pid \d+, default, requests >= 65536 B\): allocs [1-9]/m);
      const maps = spawnSync(process.execPath, [cli, 'run', '--with', name, '--', 'cat', '/proc/self/maps'], { encoding: 'utf8' }).stdout;
      expect(maps).toContain(path.join(libdir, file).replace(/\.so\.\d+$/, ''));
      expect(maps).toContain('tensorpool-preload');
    }
    const missing = spawnSync(process.execPath, [cli, 'run', '--with', path.join(tmp, 'no-allocator.so'), '--', 'true'], { encoding: 'utf8' });
    expect(missing.status).toBe(2);
    expect(missing.stderr.trim().split('\n')).toHaveLength(1);
  });

  it("what the next allocator's lookup allocates (a dlsym that allocates, as glibc's before 2.34) comes from the bootstrap buffer, and is read, grown and freed like any block", () => {
    const spy = path.join(tmp, 'dlsym-allocates.so');
    const compiled = spawnSync('cc', ['-shared', '-fPIC', '-O1', '-w', '-o', spy, path.resolve(__dirname, 'preload/dlsym-allocates.c'), '-ldl'], { encoding: 'utf8' });
    expect(compiled.status, compiled.stderr).toBe(0);
    for (const threshold of ['64K', '1']) {
      const r = semantics('chain', { LD_PRELOAD: `${preloadLibrary}:${spy}`, TENSORPOOL_TEST_MIN_BYTES: threshold });
      expect(r.code, r.err).toBe(0);
      expect(r.out).toMatch(/realloc across the threshold and back: intact/);
      // 25 and 41 bytes exactly: the bootstrap's blocks (glibc's malloc would round them up to 40 and 56).
      expect(r.err).toMatch(/^bootstrap blocks: 4, usable sizes when made: 25 41 25 41; after realloc: intact$/m);
    }
  });

  it('errno: untouched by served requests, ENOMEM after a failed posix_memalign, as glibc', () => {
    const glibc = semantics('errno');
    expect(glibc.out).toMatch(/untouched/);
    expect(preloaded('errno').out).toBe(glibc.out);
    expect(preloaded('errno', { TENSORPOOL_TEST_MIN_BYTES: '1' }).out).toBe(glibc.out);
  });

  it('under ulimit -v below the default reservation (16 GiB) the pool sizes its reservation to fit, and serves', () => {
    const r = spawnSync('sh', ['-c', 'ulimit -v 4194304 && exec "$0" errno', program], {
      encoding: 'utf8',
      env: { ...process.env, LD_PRELOAD: preloadLibrary, TENSORPOOL_STATS: '1' },
      timeout: 30_000,
    });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/served: all; errno after them untouched/);
    expect(r.stderr).not.toMatch(/the pool is off/);
    expect(Number(/requests >= 65536 B\): allocs (\d+)/.exec(r.stderr)?.[1])).toBeGreaterThanOrEqual(4);
  });

  // A program that lowers its own RLIMIT_AS after start-up (a sandbox, Python's resource.setrlimit) found the
  // pool's spare reservation (16 GiB of address space) over the limit: glibc's heap could not grow (239 of
  // 200000 small blocks, then no 1 MiB or 300 MiB block), where glibc alone serves them all. Set before the
  // pool was made, the limit turned the pool off.
  it('setrlimit(RLIMIT_AS) after start-up: the pool gives back the reservation the limit leaves no room for, and serves, as glibc', () => {
    for (const task of ['rlimit-as', 'rlimit-as-first']) {
      const glibc = semantics(task);
      expect(glibc.out).toMatch(/200000 of 200000 small blocks, 20 of 20 1 MiB blocks, 300 MiB block served/);
      for (const threshold of ['64K', '1']) {
        const ours = preloaded(task, { TENSORPOOL_TEST_MIN_BYTES: threshold, TENSORPOOL_STATS: '1' });
        expect(ours.code, ours.err).toBe(0);
        expect(ours.out).toBe(glibc.out);
        expect(ours.err).not.toMatch(/the pool is off/);
        expect(Number(/\): allocs (\d+)/.exec(ours.err)?.[1])).toBeGreaterThanOrEqual(20);
      }
    }
  });

  // Under a limit the pool's arena starts small and grows in place (os::mapGrowable), gives back the address
  // space of its free spans when a request is refused, and the table that tells its memory apart costs about
  // 1 MiB: a program gets about the blocks glibc gives it. (Before: at 200 MiB, 143 blocks and a largest block
  // of 90 MiB against glibc's 196 and 196.)
  it('under an address space limit, set before start or by the program, as many blocks and as large a block as under glibc', () => {
    const outcome = (limitMiB: number, setBy: 'shell' | 'program', env: NodeJS.ProcessEnv) => {
      const r =
        setBy === 'shell'
          ? spawnSync('sh', ['-c', `ulimit -v ${limitMiB * 1024} && exec "$0" address-limit`, program], { encoding: 'utf8', env: { ...process.env, ...env }, timeout: 60_000 })
          : spawnSync(program, ['address-limit', String(limitMiB)], { encoding: 'utf8', env: { ...process.env, ...env }, timeout: 60_000 });
      expect(r.status, r.stderr).toBe(0);
      const m = /^(\d+) blocks of 1 MiB, largest block (\d+) MiB$/.exec(r.stdout.trim());
      expect(m, r.stdout + r.stderr).not.toBeNull();
      return { blocks: Number(m![1]), largest: Number(m![2]), err: r.stderr };
    };
    for (const limitMiB of [200, 300]) {
      for (const setBy of ['shell', 'program'] as const) {
        const glibc = outcome(limitMiB, setBy, {});
        expect(glibc.blocks).toBeGreaterThan(limitMiB / 2);
        const ours = outcome(limitMiB, setBy, { LD_PRELOAD: preloadLibrary, TENSORPOOL_STATS: '1' });
        const label = `${limitMiB} MiB, set by the ${setBy}: glibc ${JSON.stringify(glibc)}, ours ${JSON.stringify(ours)}`;
        expect(ours.err, label).not.toMatch(/the pool is off/);
        expect(Number(/\): allocs (\d+)/.exec(ours.err)?.[1]), label).toBeGreaterThanOrEqual(ours.blocks); // the pool served them
        expect(ours.blocks, label).toBeGreaterThanOrEqual(0.95 * glibc.blocks);
        expect(ours.largest, label).toBeGreaterThanOrEqual(0.95 * glibc.largest);
      }
    }
  });

  // The stats line and the recording were built on the heap at exit: in a program that had used all the memory
  // its limit allows, the std::bad_alloc ended in terminate() (SIGABRT, exit 134) where glibc exits 0.
  // The limit (256 MiB of address space) is set before the program starts, the same on both sides, so that what
  // the program fills before NULL is bounded under the library as under glibc.
  it('a program that used all the memory it may have exits as under glibc, with --stats or --record (a line says what was not written)', () => {
    const exhausted = (env: NodeJS.ProcessEnv) => {
      const r = spawnSync('sh', ['-c', 'ulimit -v 262144 && exec "$0" exhaust', program], { encoding: 'utf8', env: { ...process.env, LIBC_FATAL_STDERR_: '1', ...env }, timeout: 60_000 });
      return { out: r.stdout, err: r.stderr, signal: r.signal, code: r.status };
    };
    const glibc = exhausted({});
    expect(glibc.code, glibc.err).toBe(0);
    expect(glibc.out).toBe('memory exhausted after more than 16 MiB of small blocks\n');
    // The stats line, or a line that it was not written; the recording (written with no heap, in a mapping of
    // its own), or a line naming the file and why not.
    const said = [
      [{ TENSORPOOL_STATS: '1' }, /^(tensorpool: process pool .*\n|tensorpool: out of memory at exit: no stats written\n)?$/],
      [{ TENSORPOOL_RECORD: path.join(tmp, 'exhaust.csv') }, /^(tensorpool: TENSORPOOL_RECORD=\/.*\/exhaust\.csv: Cannot allocate memory\n)?$/],
    ] as const;
    for (const threshold of ['64K', '1']) {
      for (const [env, line] of said) {
        const ours = exhausted({ LD_PRELOAD: preloadLibrary, TENSORPOOL_TEST_MIN_BYTES: threshold, ...env });
        expect(ours.signal, ours.err).toBeNull();
        expect(ours.code, ours.err).toBe(0);
        expect(ours.out).toBe(glibc.out);
        expect(ours.err).toMatch(line);
      }
    }
  });

  // glibc 2.36 serves aligned_alloc(24, n) rounded up, as memalign; 2.38 refuses it (EINVAL). The library
  // refused it on every glibc: a program that glibc 2.36 runs got NULL.
  it('aligned_alloc with an alignment that is no power of two answers as the C library of this machine', () => {
    const glibc = semantics('aligned-odd');
    expect(glibc.code).toBe(0);
    expect(glibc.out).not.toMatch(/MISALIGNED/);
    for (const threshold of ['64K', '1']) expect(preloaded('aligned-odd', { TENSORPOOL_TEST_MIN_BYTES: threshold }).out).toBe(glibc.out);
  });

  // Under `ulimit -v` the pool reserves half of the address space left: a request the other half could not
  // hold failed where glibc serves it (a 2.5 GB bytearray under `ulimit -v 4000000`: MemoryError). A failed
  // request now gets the pool's unused reservation back and is made again.
  it('under ulimit -v a request larger than what the pool left gets the unused reservation back, and is served, as glibc', () => {
    const limited = (env: NodeJS.ProcessEnv) =>
      spawnSync('sh', ['-c', 'ulimit -v 1048576 && exec "$0" address-space', program], { encoding: 'utf8', env: { ...process.env, ...env }, timeout: 30_000 });
    const glibc = limited({});
    expect(glibc.stdout).toBe('malloc(700 MiB) after a 1 MiB block: served\n');
    const ours = limited({ LD_PRELOAD: preloadLibrary, TENSORPOOL_STATS: '1' });
    expect(ours.status, ours.stderr).toBe(0);
    expect(ours.stdout).toBe(glibc.stdout);
    expect(Number(/\): allocs (\d+)/.exec(ours.stderr)?.[1])).toBeGreaterThanOrEqual(1);
  });

  it('SIGTERM or SIGINT (Ctrl-C) with its default action still writes the recording, and the program ends by the signal', () => {
    for (const signal of ['SIGTERM', 'SIGINT']) {
      const file = path.join(tmp, `${signal}.csv`);
      const r = preloaded(signal.toLowerCase(), { TENSORPOOL_RECORD: file });
      expect(r.signal).toBe(signal);
      expect(r.out).toBe(`${signal.toLowerCase()}'s action: default\n`); // as the program left it
      expect(r.out).toBe(semantics(signal.toLowerCase()).out);
      expect(readTrace(file).sizes.filter((s) => s === 256 * 1024)).toHaveLength(10);
    }
  });

  // While a recording waits to be written, the library's handler stands in for SIGINT's and SIGTERM's default
  // actions (the recording is written, then the process ends by the signal): only once the pool is made, and
  // what the program set is what it reads back. (Before: set at start in every process, and a default
  // action set with flags and a mask read back as flags 0 and an empty mask.)
  it("while recording, the program reads back the signal actions it set, and a process with no pool has no handler of the library's", () => {
    const glibc = semantics('signal-view');
    expect(glibc.out).toMatch(/^before any large block: SIGINT and SIGTERM neither caught\nSIGINT: default action, SA_RESTART set, SIGUSR1 in its mask\n/);
    expect(preloaded('signal-view', { TENSORPOOL_RECORD: path.join(tmp, 'signal-view.csv') }).out).toBe(glibc.out);
  });

  it("an invalid or double free aborts with glibc's message", () => {
    // free(p + 1) of a small block: the library read a shift from the word before it (SIGSEGV).
    const offset = preloaded('free-offset');
    expect(offset.signal).toBe('SIGABRT');
    expect(offset.err).toBe(semantics('free-offset').err);
    expect(offset.err).toBe('free(): invalid pointer\n');
    // A pool block freed twice: glibc's message for a chunk of its heap (the library keeps 256 KiB blocks
    // on glibc's heap: its mmap threshold at 32 MiB). The library ignored it.
    const glibc = semantics('double-free', { MALLOC_MMAP_THRESHOLD_: String(32 << 20) });
    const twice = preloaded('double-free');
    expect(twice.signal).toBe('SIGABRT');
    expect(twice.err).toBe(glibc.err);
    expect(twice.err).toBe('double free or corruption (!prev)\n');
  });
});

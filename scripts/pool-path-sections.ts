/**
 * Writes the pool path's list in native/preload/always_run.ld: the input sections of the functions that short
 * programs which make the process pool run in the preload library (python3 starting, a few of CPython's
 * regression tests), placed right after the always-run code, so that they lie in two or three of the
 * kernel's 64 KiB fault-around windows rather than in every window of the code (always_run.h says why
 * that matters). Run it after a change that renames, adds or moves such functions (test/preload.test.ts
 * checks a few of them), then rebuild: `rm build/Release/obj.target/tensorpool-preload.so &&
 * sh scripts/build-addon.sh` (gyp does not relink for the script alone).
 *
 * Each program runs under `valgrind --tool=callgrind --dump-instr=yes` with the library preloaded; every
 * function of the library that ran an instruction is listed, unless it has no section of its own (the
 * always-run and start-up code, already first). Functions of a libgcc.a member without function sections
 * are listed by member. Debian's valgrind; CPython's tests are Debian's libpython3.11-testsuite (skipped
 * where not installed).
 *
 *   npx tsx scripts/pool-path-sections.ts [--library FILE] [--check] [--help]
 *
 * --library: the built library to profile (default build/Release/tensorpool-preload.so, whose objects under
 * build/Release/obj.target name the sections). --check: print what would change, write nothing; exit 1 if
 * the list is out of date.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';

const USAGE = `usage: npx tsx scripts/pool-path-sections.ts [--library FILE] [--check]

Profiles short programs that make the process pool (python3 -c pass; CPython's test_bisect, test_struct,
test_list and test_re where libpython3.11-testsuite is installed) under valgrind's callgrind with the preload
library, and writes the sections of the library's functions they ran into native/preload/always_run.ld's
pool path list. Rebuild afterwards (rm build/Release/obj.target/tensorpool-preload.so; sh scripts/build-addon.sh).

  --library FILE   the built preload library (default build/Release/tensorpool-preload.so)
  --check          print the difference, write nothing; exit 1 when the list is out of date
  --help           this text`;

const { values } = parseArgs({ options: { library: { type: 'string' }, check: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } } });
if (values.help) {
  console.log(USAGE);
  process.exit(0);
}

const root = path.resolve(__dirname, '..');
const library = path.resolve(values.library ?? path.join(root, 'build/Release/tensorpool-preload.so'));
const script = path.join(root, 'native/preload/always_run.ld');
const BEGIN = '    /* The pool path (scripts/pool-path-sections.ts writes this list). */';
const END = '    /* The end of the pool path. */';
const python = '/usr/bin/python3';
const TESTS = ['test_bisect', 'test_struct', 'test_list', 'test_re'];

function programs(): string[][] {
  const list = [[python, '-c', 'pass']];
  if (fs.existsSync('/usr/lib/python3.11/test/test_bisect.py')) list.push(...TESTS.map((t) => [python, '-m', 'test', t]));
  else console.error('pool-path-sections: CPython\'s tests are not installed (apt-get install libpython3.11-testsuite): python3 -c pass alone');
  return list;
}

/** Addresses (in the library's file) of the instructions callgrind saw run in objects whose name has `object`. */
function ranAddresses(file: string, object: string, into: Set<number>): void {
  const names = new Map<string, string>();
  let inside = false;
  let last = 0;
  for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
    const ob = /^(c?ob)=\((\d+)\)(?: (.*))?$/.exec(line);
    if (ob) {
      if (ob[3]) names.set(ob[2], ob[3]);
      if (ob[1] === 'ob') inside = (names.get(ob[2]) ?? '').includes(object);
      continue;
    }
    const cost = /^(0x[0-9a-f]+|[+-]\d+|\*)\s/.exec(line);
    if (!cost) continue;
    if (cost[1].startsWith('0x')) last = parseInt(cost[1], 16);
    else if (cost[1] !== '*') last += Number(cost[1]);
    if (inside) into.add(last);
  }
}

interface Symbol {
  start: number;
  end: number;
  name: string;
}

function codeSymbols(): Symbol[] {
  const out = execFileSync('nm', ['-S', '--defined-only', library], { encoding: 'utf8', maxBuffer: 64 << 20 });
  const symbols: Symbol[] = [];
  for (const line of out.split('\n')) {
    const [address, size, kind, name] = line.trim().split(/\s+/);
    if (name && /^[tTwW]$/.test(kind)) symbols.push({ start: parseInt(address, 16), end: parseInt(address, 16) + parseInt(size, 16), name });
  }
  return symbols.sort((a, b) => a.start - b.start);
}

/** The section names of the objects the library is linked from, and the libgcc.a member of each libgcc symbol. */
function sectionsAndMembers(): { sections: Set<string>; libgccMember: Map<string, string> } {
  const objects: string[] = [];
  const walk = (dir: string) => {
    for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) walk(full);
      else if (entry.name.endsWith('.o')) objects.push(full);
    }
  };
  walk(path.join(path.dirname(library), 'obj.target/tensorpool-preload'));
  const libstdcxx = execFileSync('g++', ['-print-file-name=libstdc++.a'], { encoding: 'utf8' }).trim();
  const libgcc = execFileSync('gcc', ['-print-libgcc-file-name'], { encoding: 'utf8' }).trim();
  const sections = new Set<string>();
  for (const file of [...objects, libstdcxx]) {
    const headers = execFileSync('objdump', ['-h', file], { encoding: 'utf8', maxBuffer: 256 << 20 });
    for (const line of headers.split('\n')) {
      const name = line.trim().split(/\s+/)[1];
      if (name?.startsWith('.text.')) sections.add(name);
    }
  }
  const libgccMember = new Map<string, string>();
  for (const line of execFileSync('nm', ['-A', '--defined-only', libgcc], { encoding: 'utf8', maxBuffer: 64 << 20 }).split('\n')) {
    const m = /^[^:]+:([^:]+):[0-9a-f]+ T (\S+)$/.exec(line);
    if (m) libgccMember.set(m[2], m[1]);
  }
  return { sections, libgccMember };
}

function profile(): Set<number> {
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-pool-path-'));
  const ran = new Set<number>();
  try {
    for (const command of programs()) {
      const r = spawnSync('valgrind', ['--tool=callgrind', '--dump-instr=yes', '--trace-children=yes', `--callgrind-out-file=${work}/cg.%p`,
        'env', `LD_PRELOAD=${library}`, ...command], { encoding: 'utf8', maxBuffer: 256 << 20 });
      if (r.status !== 0) throw new Error(`${command.join(' ')} under callgrind exited ${r.status}: ${r.stderr.split('\n').slice(-4).join(' | ')}`);
      for (const file of fs.readdirSync(work)) {
        ranAddresses(path.join(work, file), path.basename(library), ran);
        fs.rmSync(path.join(work, file));
      }
      console.error(`pool-path-sections: ${command.join(' ')}: ${ran.size} instructions of the library so far`);
    }
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }
  return ran;
}

function listLines(ran: Set<number>): string[] {
  const symbols = codeSymbols();
  const { sections, libgccMember } = sectionsAndMembers();
  const lines = new Set<string>();
  let i = 0;
  for (const address of [...ran].sort((a, b) => a - b)) {
    while (i < symbols.length && symbols[i].end <= address) i++;
    if (i === symbols.length || address < symbols[i].start) continue;
    // Every name at that address: a constructor's C1 and C2 names are one function, in C2's section.
    for (let j = i; j < symbols.length && symbols[j].start === symbols[i].start; j++) {
      const name = symbols[j].name;
      if (sections.has(`.text.${name}`)) lines.add(`    *(.text.${name})`);
      else if (libgccMember.has(name)) lines.add(`    *libgcc.a:${libgccMember.get(name)}(.text)`);
    }
  }
  return [...lines].sort();
}

const text = fs.readFileSync(script, 'utf8');
const begin = text.indexOf(BEGIN);
const end = text.indexOf(END);
if (begin < 0 || end < begin) {
  console.error(`pool-path-sections: ${script} has no pool path list (the lines '${BEGIN.trim()}' and '${END.trim()}')`);
  process.exit(2);
}
const lines = listLines(profile());
const current = text.slice(begin + BEGIN.length + 1, end).split('\n').filter(Boolean);
const added = lines.filter((l) => !current.includes(l));
const dropped = current.filter((l) => !lines.includes(l));
for (const l of added) console.log(`+ ${l.trim()}`);
for (const l of dropped) console.log(`- ${l.trim()}`);
console.log(`pool path: ${lines.length} sections (${added.length} added, ${dropped.length} dropped)`);
if (values.check) process.exit(added.length || dropped.length ? 1 : 0);
fs.writeFileSync(script, text.slice(0, begin + BEGIN.length + 1) + lines.map((l) => `${l}\n`).join('') + text.slice(end));

/**
 * The allocators a replay can measure. tensorpool (the plan train() keeps: size classes trained by S0, or
 * time-shared blocks), tensorpool-classes (size classes only, for comparison) and tensorpool-offsets (the
 * offsets-mode pool, laid out by a static planner) run in their worker; the peers are the C library's
 * malloc as LD_PRELOAD makes it: glibc's by default, or Debian's jemalloc, mimalloc, tcmalloc. `ideal` is
 * the yardstick, not an allocator: the offset plan's addresses in a pre-faulted arena with no bookkeeping
 * at all (native/replay/replay.h IdealAllocator), so its ns/op is what touching the memory alone costs.
 */
import fs from 'node:fs';
import { execFileSync } from 'node:child_process';

import { preloadLibrary } from '../process/process-pool.js';

/** Every allocator a replay can measure (tensorpool's routes, the peers, and the `ideal` yardstick). */
export const ALLOCATOR_NAMES = ['tensorpool', 'tensorpool-classes', 'tensorpool-js', 'tensorpool-offsets', 'tensorpool-preload', 'malloc', 'jemalloc', 'mimalloc', 'tcmalloc', 'ideal'] as const;
/** One of ALLOCATOR_NAMES. */
export type AllocatorName = (typeof ALLOCATOR_NAMES)[number];

export interface AllocatorSpec {
  name: AllocatorName;
  /** What runs: the pool (size classes, or offsets mode), this process's malloc (LD_PRELOAD decides whose),
   *  the same malloc calls served by tensorpool's preload library (the process pool, default classes), or
   *  the ideal yardstick. */
  kind: 'pool' | 'pool-js' | 'offsets' | 'libc' | 'preload' | 'ideal';
  /** The shared library to LD_PRELOAD, once found. */
  library?: string;
  /** Its file name, and the Debian package that installs it. */
  soname?: string;
  package?: string;
  /** A name the worker finds in /proc/self/maps when the allocator is really loaded. */
  mapsName?: string;
}

/** The peers' shared libraries: each one's file name, the Debian package that installs it, and the name it has in /proc/self/maps. */
export const PEERS: Record<'jemalloc' | 'mimalloc' | 'tcmalloc', { soname: string; package: string; mapsName: string }> = {
  jemalloc: { soname: 'libjemalloc.so.2', package: 'libjemalloc2', mapsName: 'libjemalloc' },
  mimalloc: { soname: 'libmimalloc.so.2', package: 'libmimalloc2.0', mapsName: 'libmimalloc' },
  tcmalloc: { soname: 'libtcmalloc_minimal.so.4', package: 'libtcmalloc-minimal4', mapsName: 'libtcmalloc' },
};

const LIBRARY_DIRS = ['/usr/lib/x86_64-linux-gnu', '/lib/x86_64-linux-gnu', '/usr/lib64', '/usr/lib', '/usr/local/lib'];

/** The path of a shared library by its soname: the usual directories, then the linker's cache. */
export function findLibrary(soname: string): string | undefined {
  for (const dir of LIBRARY_DIRS) {
    const file = `${dir}/${soname}`;
    if (fs.existsSync(file)) return file;
  }
  try {
    const cache = execFileSync('ldconfig', ['-p'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
    const line = cache.split('\n').find((l) => l.trim().startsWith(`${soname} `));
    return line?.split('=> ')[1]?.trim();
  } catch {
    return undefined;
  }
}

/** What runs for an allocator, from its name alone (no library lookup). */
export function kindOf(name: AllocatorName): AllocatorSpec['kind'] {
  if (name === 'tensorpool' || name === 'tensorpool-classes') return 'pool';
  if (name === 'tensorpool-js') return 'pool-js';
  if (name === 'tensorpool-offsets') return 'offsets';
  if (name === 'ideal') return 'ideal';
  if (name === 'tensorpool-preload') return 'preload';
  return 'libc';
}

/** Describes an allocator; a peer whose library is missing has no `library` (see `package`). */
export function resolveAllocator(name: AllocatorName): AllocatorSpec {
  if (name === 'malloc') return { name, kind: 'libc', mapsName: 'libc.so' };
  if (name === 'tensorpool-preload') {
    return { name, kind: 'preload', mapsName: 'tensorpool-preload', library: fs.existsSync(preloadLibrary) ? preloadLibrary : undefined };
  }
  if (kindOf(name) !== 'libc') return { name, kind: kindOf(name) };
  const peer = PEERS[name as keyof typeof PEERS];
  return { name, kind: 'libc', soname: peer.soname, package: peer.package, mapsName: peer.mapsName, library: findLibrary(peer.soname) };
}

/** The allocators people would pick instead of tensorpool: what "x best peer" divides by. */
export function isPeer(name: AllocatorName): boolean {
  return kindOf(name) === 'libc';
}

/** Ours: drawn highlighted in reports. */
export function isTensorpool(name: AllocatorName): boolean {
  return kindOf(name) === 'pool' || kindOf(name) === 'offsets' || kindOf(name) === 'preload';
}

/** Runs from the size-class plan: the pool, driven natively or from JS. */
export function usesClassPlan(spec: AllocatorSpec): boolean {
  return spec.kind === 'pool' || spec.kind === 'pool-js';
}

/** Runs from the offset plan (tensorpool-offsets, and the ideal yardstick). */
export function usesOffsetPlan(name: AllocatorName): boolean {
  return kindOf(name) === 'offsets' || kindOf(name) === 'ideal';
}

export function isAvailable(spec: AllocatorSpec): boolean {
  return (spec.kind !== 'libc' && spec.kind !== 'preload') || spec.name === 'malloc' || spec.library !== undefined;
}

export function missingMessage(spec: AllocatorSpec): string {
  if (spec.kind === 'preload') return `${spec.name}: the preload library is not built (${preloadLibrary}; npm run build:native)`;
  return `${spec.name}: not installed (${spec.soname} not found; apt-get install ${spec.package}, or run bench/install-peers.sh)`;
}

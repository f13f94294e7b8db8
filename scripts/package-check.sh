#!/bin/sh
# The consumer's view of the npm package, as CI checks it: pack (which builds dist/ and the N-API prebuilds),
# install the tarball into an empty project with no C++ toolchain on PATH and without npm warning (the package
# has no install script: npm 11 warns of those that allowScripts does not cover), check that every relative
# link of its README and docs leads to a file it ships, then load it with require() and import(), type-check a
# consumer against its declarations (tensorpool/onnxruntime's too, without the optional onnxruntime-node), and
# run the CLI's main job.
#   usage: npm run test:package (sh scripts/package-check.sh)
set -eu
case "${1-}" in -h|--help) exec sh "$(dirname "$0")/usage.sh" "$0" ;; esac
cd "$(dirname "$0")/.."
repo=$PWD
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

npm pack --pack-destination "$work" >"$work/pack.log"
# Packing leaves the clone's own build as node-gyp made it: `npm test` after `npm pack` reads both, symbols and all.
for built in build/Release/tensorpool.node build/Release/tensorpool-preload.so; do
  readelf -S "$built" 2>/dev/null | grep -q '\.symtab' || { echo "package-check: packing left $built missing or stripped" >&2; exit 1; }
done
tarball=$(ls "$work"/tensorpool-*.tgz)
tar -tzf "$tarball" >"$work/contents"
for required in package/prebuilds/linux-x64/tensorpool.node package/prebuilds/linux-x64/tensorpool-preload.so package/dist/index.js package/dist/index.d.ts \
  package/dist/cli/main.js package/dist/onnxruntime.js package/dist/onnxruntime.d.ts package/traces/resnet18_train.csv.gz \
  package/dist/hooks/node.js package/hooks/python/sitecustomize.py package/dist/onnxruntime-peer.d.ts package/docs/process-allocator.md package/docs/onnxruntime.svg; do
  grep -qx "$required" "$work/contents" || { echo "package-check: $required is not in the tarball" >&2; exit 1; }
done

# A PATH with node, npm, npx and the shell npm runs scripts with, nothing else: installing and using the
# package must not need g++, cc or make (the system's bin directories hold them, so they are not on it).
mkdir -p "$work/bin" "$work/consumer"
for tool in node npm npx sh; do ln -s "$(command -v "$tool")" "$work/bin/$tool"; done
for tool in g++ c++ gcc cc clang make cmake; do
  if PATH="$work/bin" command -v "$tool" >/dev/null 2>&1; then echo "package-check: $tool is on the restricted PATH" >&2; exit 1; fi
done
cd "$work/consumer"
echo '{ "name": "consumer", "version": "1.0.0", "private": true }' >package.json
PATH="$work/bin" npm install --no-audit --no-fund --loglevel=warn "$tarball" >"$work/install.out" 2>&1 || { cat "$work/install.out"; exit 1; }
if grep -i 'warn' "$work/install.out"; then echo "package-check: npm warned installing the tarball (above)" >&2; exit 1; fi
if [ -d node_modules/tensorpool/build ]; then echo "package-check: installing compiled the addon (build/ exists)" >&2; exit 1; fi
# No script runs at install, nor at a git install (prepare), and no binding.gyp that npm would build by default.
PATH="$work/bin" node -e "
const fs = require('fs');
const scripts = require('tensorpool/package.json').scripts ?? {};
const run = ['preinstall', 'install', 'postinstall', 'prepare'].filter((name) => name in scripts);
if (run.length) throw new Error('the package has install scripts: ' + run.join(', '));
const gyp = fs.readdirSync('node_modules/tensorpool').filter((f) => f.endsWith('.gyp'));
if (gyp.length) throw new Error('npm would compile ' + gyp.join(', ') + ' at install');
"
# README and the docs as read in node_modules (or on a registry's page): every relative link leads to a file
# the package ships.
PATH="$work/bin" node -e "
const fs = require('fs');
const path = require('path');
const root = 'node_modules/tensorpool';
const documents = ['README.md', ...fs.readdirSync(path.join(root, 'docs')).filter((f) => f.endsWith('.md')).map((f) => 'docs/' + f)];
const dead = [];
let links = 0;
for (const doc of documents) {
  const text = fs.readFileSync(path.join(root, doc), 'utf8');
  for (const m of text.matchAll(/\\]\\(([^)\\s]+)\\)/g)) {
    const target = m[1].split('#')[0];
    if (/^[a-z]+:/.test(m[1]) || target === '') continue;
    links++;
    if (!fs.existsSync(path.join(root, path.dirname(doc), target))) dead.push(doc + ': ' + m[1]);
  }
}
if (links < 20) throw new Error('only ' + links + ' relative links found in ' + documents.join(', '));
if (dead.length) throw new Error('links to files the package does not ship:\\n  ' + dead.join('\\n  '));
"

PATH="$work/bin" node -e "
const tp = require('tensorpool');
const pool = new tp.Pool();
const x = pool.float32(1 << 20);
x.fill(1);
pool.release(x);
if (pool.stats().allocs !== 1) throw new Error('require: the pool did not serve');
"
# onnxruntime-node is an optional peer: the subpath loads without it and says what is missing when used.
PATH="$work/bin" node -e "
const ortHelpers = require('tensorpool/onnxruntime');
if (typeof ortHelpers.PooledSession !== 'function') throw new Error('tensorpool/onnxruntime: PooledSession missing');
try { ortHelpers.loadOnnxRuntime(); throw new Error('onnxruntime-node was installed with tensorpool'); }
catch (error) { if (error.code !== 'ERR_TP_ONNXRUNTIME') throw error; }
"
PATH="$work/bin" npx tensorpool run --stats -- node -e "
const { processPool, preloadLibrary } = require('tensorpool');
if (!preloadLibrary.includes('prebuilds') || !processPool()) throw new Error('run: the prebuilt preload library did not serve');
" 2>"$work/run.err"
grep -q '^tensorpool: process pool' "$work/run.err" || { cat "$work/run.err"; echo "package-check: tensorpool run printed no stats" >&2; exit 1; }
# Without the launcher: LD_PRELOAD set to the path 'tensorpool info --library' prints (a Dockerfile's ENV).
library=$(PATH="$work/bin" npx tensorpool info --library)
case "$library" in */prebuilds/linux-x64/tensorpool-preload.so) ;; *) echo "package-check: info --library printed '$library'" >&2; exit 1 ;; esac
LD_PRELOAD="$library" PATH="$work/bin" node -e "
if (!require('tensorpool').processPool()) throw new Error('LD_PRELOAD of the path info --library printed: no process pool');
"
PATH="$work/bin" node --input-type=module -e "
const { Pool, readTrace } = await import('tensorpool');
if (typeof Pool !== 'function' || typeof readTrace !== 'function') throw new Error('import: named exports missing');
"
cat >consumer.ts <<'EOF'
import { Pool, train, readTrace, type PoolStats, type Trace } from 'tensorpool';
const pool: Pool = new Pool({ prefault: false });
const view: Float32Array = pool.float32(1024);
pool.release(view);
const stats: PoolStats = pool.stats();
const allocs: number = stats.allocs;
const trace: Trace = readTrace('trace.csv');
const arena: number = train(trace).arenaBytes;
export { allocs, arena };
EOF
# tensorpool/onnxruntime's declarations name onnxruntime-node's types: they must stand alone without it.
cat >consumer-ort.ts <<'EOF'
import { Pool } from 'tensorpool';
import { PooledSession, pooledTensor, type Feeds, type OrtTensor } from 'tensorpool/onnxruntime';
const x: OrtTensor = pooledTensor(new Pool(), 'float32', [1, 3]);
const dims: readonly number[] = x.dims;
export async function infer(session: PooledSession): Promise<readonly number[]> {
  const feeds: Feeds = { x };
  session.release(...Object.values(await session.run(feeds)));
  return dims;
}
EOF
if [ -e node_modules/onnxruntime-node ]; then echo "package-check: onnxruntime-node was installed with tensorpool" >&2; exit 1; fi
"$repo/node_modules/.bin/tsc" --noEmit --strict --module node16 --moduleResolution node16 --target es2022 \
  --types node --typeRoots "$repo/node_modules/@types" consumer.ts consumer-ort.ts
PATH="$work/bin" npx tensorpool bench --reps 2 --allocators tensorpool,malloc >"$work/bench.txt"
grep -q '^tensorpool' "$work/bench.txt" || { cat "$work/bench.txt"; echo "package-check: bench printed no tensorpool row" >&2; exit 1; }
echo "package-check: the tarball installs without a compiler or a warning, its README and docs links resolve, it loads with require and import, type-checks (tensorpool/onnxruntime without onnxruntime-node too), runs bench and run (the preload library)"

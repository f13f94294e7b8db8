#!/bin/sh
# Runs the native code under AddressSanitizer + UndefinedBehaviorSanitizer (gcc's runtimes, libasan8 and
# libubsan1); any report fails the run:
#  1. the native unit tests (test/native, and test/native/os's in a process of its own), built with both sanitizers;
#  2. the addon built with both sanitizers (cmake-js), loaded into Node with the runtimes preloaded, under
#     the vitest suites that drive the core in-process (pool, streams, training, traces, planners, adaptive mode, a pool shared with worker_threads);
#  3. the same addon on Node 22 (scripts/node-bin.sh), whose pools have a front cache, under the pool,
#     front-cache and shared-pool suites.
#   usage: npm run test:sanitize (sh scripts/sanitize.sh)
set -eu
case "${1-}" in -h|--help) exec sh "$(dirname "$0")/usage.sh" "$0" ;; esac
cd "$(dirname "$0")/.."
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

cmake -S . -B build-asan -DTP_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build-asan -j "$(nproc)"
./build-asan/tp_native_tests
./build-asan/tp_tracked_near
echo "sanitize: native tests clean under ASan + UBSan"

npx cmake-js compile --out build-asan-addon --CDTP_SANITIZE=ON --CDCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
npx tsc -p tsconfig.json
# Node itself leaks at exit by design: leak checking is for the native tests above.
sanitized() {
  ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
  LD_PRELOAD="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)" \
  TENSORPOOL_ADDON="$PWD/build-asan-addon/Release/tensorpool.node" \
    "$@"
}
sanitized npx vitest run test/pool.test.ts test/streams.test.ts test/train.test.ts test/trace.test.ts test/planner.test.ts test/adaptive.test.ts test/shared-pool.test.ts
echo "sanitize: the addon is clean under ASan + UBSan in the pool, stream, training, trace, planner, adaptive and shared-pool suites"
node22=$(sh scripts/node-bin.sh 22)
sanitized "$node22/node" node_modules/vitest/vitest.mjs run test/front-cache.test.ts test/pool.test.ts test/train.test.ts test/shared-pool.test.ts
echo "sanitize: the addon is clean under ASan + UBSan on $("$node22/node" --version) with the front cache (front-cache, pool, training, shared-pool suites)"

#!/bin/sh
# Coverage-guided fuzzing of the native core (libFuzzer; clang-14 with libclang-rt-14-dev, the addon itself
# keeps building with g++). Each target in test/fuzz runs for FUZZ_SECONDS (default 60) under ASan + UBSan
# (preload_malloc, which is the process's malloc, under UBSan only; with TENSORPOOL_TEST_MIN_BYTES=4K),
# starting from its committed seed corpus (test/fuzz/corpus/<target>); what it learns goes to
# build-fuzz/corpus/<target>, never into the repository. A finding stops the run: the input is written to
# build-fuzz/crash-* (replay it with ./build-fuzz/fuzz_<target> <file>). Prints executions per target.
# The target `readers` is the file readers under mutation (test/fuzz/readers-main.ts, fast-check), in Node.
#
#   usage: npm run fuzz (sh scripts/fuzz.sh); FUZZ_SECONDS, FUZZ_TARGETS, FUZZ_CXX in the environment:
#   npm run fuzz                  FUZZ_SECONDS=600 npm run fuzz                 FUZZ_TARGETS=planners npm run fuzz
set -eu
case "${1-}" in -h|--help) exec sh "$(dirname "$0")/usage.sh" "$0" ;; esac
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-60}
case "$seconds" in
  ''|*[!0-9]*|0) echo "fuzz: FUZZ_SECONDS must be a whole number of seconds >= 1, got '$seconds'" >&2; exit 2 ;;
esac
targets=${FUZZ_TARGETS:-"pool_ops planners preload_malloc readers"}
native=$(echo " $targets " | sed 's/ readers / /g' | xargs)
cxx=${FUZZ_CXX:-clang++-14}
if [ -n "$native" ] && ! command -v "$cxx" >/dev/null 2>&1; then
  echo "fuzz: $cxx not found (Debian: apt-get install clang-14 libclang-rt-14-dev; or set FUZZ_CXX; FUZZ_TARGETS=readers needs none)" >&2
  exit 2
fi
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TENSORPOOL_TEST_MIN_BYTES=4K  # the tests' setting: a threshold below the floor, both sides of it fuzzed
if [ -n "$native" ]; then
  cmake -S . -B build-fuzz -DTP_FUZZ=ON -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=Debug >/dev/null
  cmake --build build-fuzz -j "$(nproc)" >/dev/null
fi
if [ -n "$native" ]; then printf '%-15s %8s %12s %10s %12s\n' target seconds executions 'exec/s' 'new inputs'; fi
for target in $native; do
  seeds=test/fuzz/corpus/$target
  work=build-fuzz/corpus/$target
  log=build-fuzz/$target.log
  [ -x "build-fuzz/fuzz_$target" ] || { echo "fuzz: no target '$target' (test/fuzz/*.cc)" >&2; exit 2; }
  mkdir -p "$work"
  if ! "./build-fuzz/fuzz_$target" -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix=build-fuzz/ \
      "$work" "$seeds" >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "fuzz: $target found a failure (log: $log; input: build-fuzz/crash-*)" >&2
    exit 1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
  printf '%-15s %8s %12s %10s %12s\n' "$target" "$seconds" "$runs" "$rate" "$(ls "$work" | wc -l)"
done
case " $targets " in
  *" readers "*)
    npx tsc -p tsconfig.json
    FUZZ_SECONDS=$seconds npx tsx test/fuzz/readers-main.ts ;;
esac

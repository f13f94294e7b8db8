#!/bin/sh
# CPython's own regression tests in front of the preload library: a subset of Lib/test of the system's
# python3.11 (Debian's libpython3.11-testsuite, installed here when missing and this is root) that exercises
# memory (buffers, bytes, pickling, compression, hashing, mmap, the garbage collector, tracemalloc, a 2 GiB
# test_bigmem), threads, fork, subprocesses, signals and faults, and the waits the library interposes (select,
# poll, epoll, selectors and asyncio's event loop, with their timeouts and signals). It runs under plain glibc, then as
# `tensorpool run` runs Python (LIBRARY in LD_PRELOAD, the sitecustomize of hooks/python on PYTHONPATH) at the
# default threshold, and at TENSORPOOL_TEST_MIN_BYTES=1 (the tests' setting for a threshold below the pool's
# floor) with PYTHONMALLOC=malloc: every allocation of the
# interpreter, its objects included, through the pool (under glibc, PYTHONMALLOC=malloc passes the same
# tests). Every test that passes under glibc must pass under the library: the script exits 1 otherwise, and
# prints a row per test and a line per configuration. A test that fails (not crashes, not hangs) where it
# must pass runs again alone, once: timing tests fail now and then on a loaded host, under glibc too. One
# that passes then is shown as flaky ("fail,pass") and not counted.
#
# No third-party source enters the repository: the tests are those the Debian package installs for the
# interpreter that runs them. Where that interpreter or its test package is missing (not Debian, not root),
# the script says so and exits 0, having run nothing. 2 GiB of RSS at most (test_bigmem, run alone);
# 7-9 minutes on 2 cores shared with other builds: about 145 s under glibc and at the default threshold,
# 165-180 s at 1 byte with PYTHONMALLOC=malloc (a hang waits out its timeout).
#
#   usage: sh scripts/python-tests.sh [--help] [LIBRARY]   (npm run test:python-suite)
#   LIBRARY defaults to build/Release/tensorpool-preload.so; another branch's build can be given.
#
# Environment: PYTHON_TESTS_PYTHON, the interpreter (default /usr/bin/python3.11, whose Lib/test Debian's
# package installs); PYTHON_TESTS_TIMEOUT, seconds a test module may take before regrtest kills it as hung
# (default 300); PYTHON_TESTS_JOBS, test modules run at once (default: the number of CPUs + 2, as regrtest's
# -j0: the tests mostly wait on timers and children); PYTHON_TESTS_ONLY, an extended regular expression:
# only the tests whose names match. The output of a run with a regression is kept (the last line names it).
set -eu
. "$(dirname "$0")/lib/library-argument.sh"  # --help, LIBRARY: sets repo and library
python=${PYTHON_TESTS_PYTHON:-/usr/bin/python3.11}
timeout=${PYTHON_TESTS_TIMEOUT:-300}
jobs=${PYTHON_TESTS_JOBS:-$(($(nproc) + 2))}
only=${PYTHON_TESTS_ONLY:-}
. "$(dirname "$0")/lib/python-configurations.sh"  # clears the environment (read settings first); glibc, default, min1

# --- The interpreter and its test package -------------------------------------------------------------------
has_tests() { [ -x "$python" ] && [ "$("$python" -c 'import test.libregrtest, test.test_bigmem; print("yes")' 2>/dev/null)" = yes ]; }
if ! has_tests && [ -x "$python" ]; then debian_install libpython3.11-testsuite; fi
if ! has_tests; then
  if [ -x "$python" ]; then why="$python has no test package (Debian: apt-get install libpython3.11-testsuite, as root)"
  else why="no interpreter at $python (set PYTHON_TESTS_PYTHON)"; fi
  skipped "$why"
fi
need_tools timeout nice

# --- What runs ---------------------------------------------------------------------------------------------
# Debian's package leaves out test_capi and test_sqlite3 (packages of Lib/test in 3.11), so they are not
# here; test_embed and test_tracemalloc drive the C API's allocators instead.
tests="
  test_array test_buffer test_bytes test_memoryview test_mmap test_struct test_marshal test_pickle test_json
  test_zlib test_bz2 test_lzma test_gzip test_zipfile test_hashlib test_io test_tempfile test_csv
  test_unicode test_re test_list test_deque test_dict test_set test_long test_decimal test_datetime
  test_itertools test_collections test_xml_etree_c test_ctypes
  test_gc test_weakref test_tracemalloc test_sys test_embed test_cmd_line test_resource test_faulthandler
  test_thread test_threading test_threading_local test_threadsignals test_queue
  test_os test_posix test_fork1 test_wait4 test_subprocess test_multiprocessing_fork test_signal test_select
  test_selectors test_epoll test_poll test_asyncio
"
# Run alone, with regrtest's memory limit at its smallest (2G): strings, bytes and lists of 2 GiB built,
# grown and copied (test_bigmem), and a request past the address space (test_bigaddrspace).
big_tests="test_bigmem test_bigaddrspace"
if [ -n "$only" ]; then
  tests=$(printf '%s\n' $tests | grep -E -- "$only" || true)
  big_tests=$(printf '%s\n' $big_tests | grep -E -- "$only" || true)
fi

results=$(mktemp -d "${TMPDIR:-/tmp}/python-tests.XXXXXX")
trap 'rm -rf "$results"' EXIT INT TERM
printf '%s\n' $big_tests $tests >"$results/list"
: >"$results/flaky"
python_hooks "$results"

# regrtest CONFIG LOG ARGS...: python -m test ARGS under CONFIG (glibc, default or min1), its output appended
# to LOG, in a directory of its own (regrtest's temporary files), niced (others may be timing on this host).
# regrtest runs each test module in a worker process (-j, also -j1), which inherits the environment, and
# kills one that runs past $timeout ("timed out"); the whole run is killed past 8 of those timeouts.
regrtest() {
  config=$1 log=$2
  shift 2
  preload=$(python_environment "$config")
  dir=$(mktemp -d "$results/run.XXXXXX")
  # shellcheck disable=SC2086
  (cd "$dir" && TMPDIR=$dir timeout -k 10 $((timeout * 8)) env $preload nice -n 10 "$python" -m test -W --timeout "$timeout" "$@") >>"$log" 2>&1 || true
  rm -rf "$dir"
}
# verdicts LOG DIR: each test's verdict in LOG (regrtest's progress lines: "0:00:07 load avg: 1.92
# [ 7/56/2] test_x failed (1 failure) -- running: ...") written to DIR/<test>.
verdicts() {
  mkdir -p "$2"
  sed -n 's/^.*\] \(test_[A-Za-z0-9_]*\) \(.*\)$/\1 \2/p' "$1" | sed 's/ -- running: .*//' |
    while read -r name outcome; do
      case $outcome in
        passed*) verdict=pass ;;
        skipped*|"ran no tests"*) verdict=skipped ;;
        "failed (env changed)"*) verdict=env-changed ;;
        "timed out"*) verdict=hang ;;
        crashed*) verdict="crash$(echo "$outcome" | sed -n 's/.*Exit code \(-\{0,1\}[0-9]*\).*/:\1/p')" ;;
        *) verdict=fail ;;
      esac
      echo "$verdict" >"$2/$name"
    done
}
# A test module with no verdict was never reported: its run was killed past every timeout, or crashed.
verdict() { cat "$results/$1/$2" 2>/dev/null || echo no-verdict; }
for config in $python_configurations; do
  started=$(date +%s)
  # shellcheck disable=SC2086
  [ -z "$big_tests" ] || regrtest "$config" "$results/$config.log" -j1 -M 2G $big_tests
  # shellcheck disable=SC2086
  [ -z "$tests" ] || regrtest "$config" "$results/$config.log" -j"$jobs" $tests
  echo $(($(date +%s) - started)) >"$results/$config.seconds"
  verdicts "$results/$config.log" "$results/$config"
  if [ "$config" = glibc ] && [ -z "$(ls "$results/glibc")" ]; then
    tail -n 20 "$results/glibc.log" >&2
    echo "python-tests: regrtest reported no test under glibc itself (its output's last lines above)" >&2
    exit 2
  fi
done
# Timing tests (test_signal's timers, test_threading's and multiprocessing's timeouts) fail now and then on a
# loaded host, under glibc too (test_multiprocessing_fork, test_signal and test_threading in one run beside
# other builds; each passed run again). A test that failed (not crashed, not hung) where the comparison needs
# it to pass runs again, alone, once: one that passes then is reported as flaky and not counted. A crash or
# a hang is never run again.
for config in $python_configurations; do
  while read -r test; do
    v=$(verdict "$config" "$test")
    case $v in fail|env-changed) ;; *) continue ;; esac
    [ "$config" = glibc ] || [ "$(verdict glibc "$test")" = pass ] || continue
    regrtest "$config" "$results/$config.rerun.log" -j1 $(case " $big_tests " in *" $test "*) echo -M 2G ;; esac) "$test"
    verdicts "$results/$config.rerun.log" "$results/$config.rerun"
    [ "$(verdict "$config.rerun" "$test")" = pass ] || continue
    echo "$test under $config: $v, then passed run again alone" >>"$results/flaky"
    echo pass >"$results/$config/$test"
    echo "$v,pass" >"$results/$config.rerun/$test.cell"
  done <"$results/list"
done

# --- Report -------------------------------------------------------------------------------------------------
# A test's verdict as the table shows it: a flaky one's both runs ("fail,pass").
cell() { cat "$results/$1.rerun/$2.cell" 2>/dev/null || verdict "$1" "$2"; }
echo "# each test module's verdict under $python ($("$python" -c 'import platform; print(platform.python_version())'), glibc $(ldd --version | sed -n '1s/.* //p')), then with $library preloaded"
printf '%-28s %-12s %-12s %-12s\n' test glibc library "library, min 1, PYTHONMALLOC=malloc"
regressions=0
while read -r test; do
  g=$(verdict glibc "$test")
  mark=
  for config in default min1; do
    [ "$g" = pass ] && [ "$(verdict "$config" "$test")" != pass ] || continue
    mark="$mark  <- regression ($config)"
    regressions=$((regressions + 1))
  done
  printf '%-28s %-12s %-12s %-12s%s\n' "$test" "$(cell glibc "$test")" "$(cell default "$test")" "$(cell min1 "$test")" "$mark"
done <"$results/list"
echo
while read -r line; do echo "flaky, not counted: $line"; done <"$results/flaky"
for config in $python_configurations; do
  label=$(python_configuration_label "$config")
  passed=0; skipped=0; other=0
  while read -r test; do
    case $(verdict "$config" "$test") in pass) passed=$((passed + 1)) ;; skipped) skipped=$((skipped + 1)) ;; *) other=$((other + 1)) ;; esac
  done <"$results/list"
  echo "$label: $passed passed, $other failed, $skipped skipped, $(cat "$results/$config.seconds") s"
done
while read -r test; do
  g=$(verdict glibc "$test")
  [ "$g" = pass ] || [ "$g" = skipped ] || echo "glibc fails $test itself ($g): not counted"
done <"$results/list"
for config in default min1; do
  while read -r test; do
    [ "$(verdict glibc "$test")" = pass ] && [ "$(verdict "$config" "$test")" != pass ] || continue
    echo "--- $test under the library ($config): $(verdict "$config" "$test"); the last lines regrtest printed for it:"
    # From its progress line to the next one (regrtest -W prints a failed test's output after its line).
    awk -v t="] $test " 'index($0, t) { on = 1; print; next } /^[0-9]+:[0-9][0-9]:[0-9][0-9] load avg|^== Tests result/ { on = 0 } on' \
      "$results/$config.log" | tail -n 30
  done <"$results/list"
done
echo "python-tests: $(wc -l <"$results/list") test modules, $jobs at once (regrtest -j), per-test timeout $timeout s"
if [ "$regressions" -gt 0 ]; then
  trap - EXIT INT TERM
  echo "python-tests: $regressions test modules pass under glibc and not under the library (output: $results/*.log)" >&2
  exit 1
fi

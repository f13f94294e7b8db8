#!/bin/sh
# numpy's own tests in front of the preload library: 47 test modules of the system's numpy (Debian's
# python3-numpy for /usr/bin/python3.11, which installs them) that exercise memory: core (ndarray, ufuncs,
# dtypes, nditer, indexing, einsum, memmap, dlpack, the data memory handlers of test_mem_policy), masked
# arrays (ma), lib (function_base, io, loadtxt, arraypad, stride_tricks, format), linalg, fft and random.
# Arrays of 64 KiB or more come from the pool at the default threshold (~800 blocks in test_multiarray's
# run): zeros through calloc (the pool's never-written blocks are not written again), growing arrays through
# realloc, aligned ones through numpy's own aligned allocator. Each module runs with
# pytest (Debian's python3-pytest, with python3-hypothesis, which numpy's conftest.py imports; the packages installed
# here when missing and this is root), its tests marked slow left
# out, under plain glibc, then as `tensorpool run` runs Python (LIBRARY in LD_PRELOAD, the sitecustomize of
# hooks/python on PYTHONPATH) at the default threshold, and at TENSORPOOL_TEST_MIN_BYTES=1 (the tests' setting
# for a threshold below the pool's floor) with PYTHONMALLOC=malloc
# (every allocation of the interpreter and of numpy through the pool). Every test that passes under glibc must
# pass under the library: the script exits 1 otherwise, naming each such test, and prints a row per module
# and a line per configuration. A test that fails (not crashes, not hangs) where it must pass runs again
# alone, once; one that passes then is shown as flaky and not counted (at most 10 of them a configuration:
# more is no flake).
#
# No third-party source enters the repository: the tests are those the Debian package installs. Where the
# interpreter, its numpy, pytest or hypothesis is missing (not Debian, not root), the script says so and exits 0, having
# run nothing. About 4 minutes on 2 cores shared with other builds (the 141 module runs, 2 at a time, take
# ~115 s under glibc, ~110 s at the default threshold and ~210 s at 1 byte); a hang waits out its timeout.
#
#   usage: sh scripts/numpy-tests.sh [--help] [LIBRARY]   (npm run test:numpy-suite)
#   LIBRARY defaults to build/Release/tensorpool-preload.so; another branch's build can be given.
#
# Environment: NUMPY_TESTS_PYTHON, the interpreter (default /usr/bin/python3.11); NUMPY_TESTS_TIMEOUT,
# seconds a module's run may take before it is killed as hung (default 300); NUMPY_TESTS_JOBS, module runs
# at once (default: the number of CPUs); NUMPY_TESTS_ONLY, an extended regular expression: only the modules
# whose paths (core/tests/test_umath.py) match. The output of a run with a regression is kept (the last line
# names its directory).
set -eu
. "$(dirname "$0")/lib/library-argument.sh"  # --help, LIBRARY: sets repo and library
python=${NUMPY_TESTS_PYTHON:-/usr/bin/python3.11}
timeout=${NUMPY_TESTS_TIMEOUT:-300}
jobs=${NUMPY_TESTS_JOBS:-$(nproc)}
only=${NUMPY_TESTS_ONLY:-}
max_reruns=10
. "$(dirname "$0")/lib/python-configurations.sh"  # clears the environment (read settings first); glibc, default, min1

# --- The interpreter, its numpy and pytest -------------------------------------------------------------------
has_numpy() { [ -x "$python" ] && "$python" -c 'import numpy.core.tests' >/dev/null 2>&1; }
has_pytest() { "$python" -c 'import pytest, hypothesis' >/dev/null 2>&1; }
# A clean Debian machine may have none of them (python3-numpy does not bring the other two, not even as a
# recommendation): they are installed where this is root, so that CI runs the tests.
if [ -x "$python" ] && { ! has_numpy || ! has_pytest; }; then debian_install python3-numpy python3-pytest python3-hypothesis; fi
if ! has_numpy || ! has_pytest; then
  if [ ! -x "$python" ]; then why="no interpreter at $python (set NUMPY_TESTS_PYTHON)"
  elif ! has_numpy; then why="$python has no numpy with its tests (Debian: apt-get install python3-numpy, as root)"
  else why="$python has no pytest or no hypothesis (Debian: apt-get install python3-pytest python3-hypothesis, as root)"; fi
  skipped "$why"
fi
need_tools timeout nice
numpy=$("$python" -c 'import os, numpy; print(os.path.dirname(numpy.__file__))')

# --- What runs ---------------------------------------------------------------------------------------------
# The longest first (test_ufunc, test_umath, test_multiarray: ~12 s each under glibc), so that the runs end
# together. A module this numpy does not have is left out, with a line.
modules="
  ma/tests/test_core.py core/tests/test_ufunc.py core/tests/test_umath.py core/tests/test_multiarray.py
  linalg/tests/test_linalg.py lib/tests/test_format.py core/tests/test_strings.py
  random/tests/test_generator_mt19937.py lib/tests/test_function_base.py core/tests/test_einsum.py
  fft/tests/test_pocketfft.py core/tests/test_dtype.py core/tests/test_nditer.py core/tests/test_numeric.py
  core/tests/test_mem_overlap.py random/tests/test_random.py random/tests/test_randomstate.py
  lib/tests/test_nanfunctions.py lib/tests/test_io.py lib/tests/test_loadtxt.py lib/tests/test_arraypad.py
  core/tests/test_regression.py core/tests/test_casting_unittests.py core/tests/test_datetime.py
  core/tests/test_mem_policy.py random/tests/test_smoke.py core/tests/test_indexing.py core/tests/test_api.py
  core/tests/test_shape_base.py core/tests/test_array_coercion.py core/tests/test_item_selection.py
  core/tests/test_records.py core/tests/test_memmap.py core/tests/test_dlpack.py core/tests/test_scalarbuffer.py
  core/tests/test_unicode.py core/tests/test_half.py lib/tests/test_stride_tricks.py lib/tests/test_shape_base.py
  lib/tests/test_arraysetops.py lib/tests/test_histograms.py lib/tests/test_recfunctions.py
  lib/tests/test_packbits.py linalg/tests/test_regression.py fft/tests/test_helper.py random/tests/test_direct.py
  random/tests/test_generator_mt19937_regressions.py
"
[ -z "$only" ] || modules=$(printf '%s\n' $modules | grep -E -- "$only" || true)
present=
for module in $modules; do
  if [ -f "$numpy/$module" ]; then present="$present $module"; else echo "numpy-tests: $numpy has no $module: left out"; fi
done
modules=$present
[ -n "$modules" ] || { echo "numpy-tests: no test module to run" >&2; exit 2; }

results=$(mktemp -d "${TMPDIR:-/tmp}/numpy-tests.XXXXXX")
trap 'rm -rf "$results"' EXIT INT TERM
python_hooks "$results"
mkdir "$results/plugin" "$results/claimed"
cp "$repo/scripts/lib/pytest_outcomes.py" "$results/plugin/"
for config in $python_configurations; do mkdir "$results/$config" "$results/$config.rerun"; done

# name MODULE: the file names of MODULE's results (core.tests.test_umath).
name() { echo "$1" | sed 's,/,.,g; s,\.py$,,'; }
# pytest_run CONFIG OUT TARGET: pytest on TARGET (a module's path, or a test's node id) under CONFIG, with
# the outcomes written to OUT.outcomes, its output to OUT.log, its exit status to OUT.status (124 or 137:
# killed past $timeout), in a directory of its own (numpy's and hypothesis's temporary files), niced (others
# may be timing on this host). No bytecode is written (the tests are the system's).
pytest_run() {
  dir=$(mktemp -d "$results/run.XXXXXX")
  status=0
  # shellcheck disable=SC2046
  (cd "$dir" && TMPDIR=$dir timeout -k 10 "$timeout" env $(python_environment "$1" "$results/plugin") PYTHONDONTWRITEBYTECODE=1 \
    nice -n 10 "$python" -m pytest -p no:cacheprovider -p pytest_outcomes --outcomes-to "$2.outcomes" -q -m "not slow" "$3") \
    >"$2.log" 2>&1 || status=$?
  case $status in
    124|137) echo "numpy-tests: pytest killed past $timeout s" >>"$2.log" ;;
    1[2-9][0-9]) echo "numpy-tests: pytest killed by signal $((status - 128))" >>"$2.log" ;;
  esac
  echo "$status" >"$2.status"
  rm -rf "$dir"
}
# Each of $jobs workers takes the next (module, configuration) not yet taken (mkdir: one taker each) and runs it.
worker() {
  for module in $modules; do
    for config in $python_configurations; do
      mkdir "$results/claimed/$config.$(name "$module")" 2>/dev/null || continue
      started=$(date +%s)
      pytest_run "$config" "$results/$config/$(name "$module")" "$numpy/$module"
      echo $(($(date +%s) - started)) >"$results/$config/$(name "$module").seconds"
    done
  done
}
started=$(date +%s)
worker_pids=
for _ in $(seq "$jobs"); do
  worker &
  worker_pids="$worker_pids $!"
done
# shellcheck disable=SC2086
wait $worker_pids
seconds=$(($(date +%s) - started))

# outcomes CONFIG: every outcome of CONFIG's runs, a line "MODULE::TEST<TAB>OUTCOME" (pytest's node id of a
# test is relative to a root directory it chooses: the module's path is put in its place).
outcomes() {
  for module in $modules; do
    sed "s,^\([a-z]*\)	[^:]*::\(.*\)$,$module::\2	\1," "$results/$1/$(name "$module").outcomes" 2>/dev/null || true
  done
}
# Timing tests fail now and then on a loaded host. A test that failed where the comparison needs it to pass
# (under glibc: any) runs again, alone, once: one that passes then is reported as flaky and counted as
# passed. A crash or a hang (a test with no outcome) is never run again.
: >"$results/flaky"
for config in $python_configurations; do
  outcomes "$config" >"$results/$config.all"
  if [ "$config" = glibc ]; then
    [ -s "$results/glibc.all" ] || { tail -n 20 "$results"/glibc/*.log >&2; echo "numpy-tests: pytest reported no test under glibc itself (its output's last lines above)" >&2; exit 2; }
    awk -F '\t' '$2 == "fail" { print $1 }' "$results/glibc.all" >"$results/glibc.failed"
  else
    awk -F '\t' 'FILENAME == ARGV[1] { if ($2 == "pass") must[$1] = 1; next } ($1 in must) && $2 == "fail" { print $1 }' \
      "$results/glibc.all" "$results/$config.all" >"$results/$config.failed"
  fi
  [ "$(wc -l <"$results/$config.failed")" -le "$max_reruns" ] || continue
  n=0
  while IFS= read -r test; do
    n=$((n + 1))
    pytest_run "$config" "$results/$config.rerun/$n" "$numpy/$test"
    grep -q '^pass	' "$results/$config.rerun/$n.outcomes" 2>/dev/null || continue
    echo "$test under $config: failed, then passed run again alone" >>"$results/flaky"
    awk -F '\t' -v t="$test" 'BEGIN { OFS = FS } $1 == t { $2 = "pass" } { print }' "$results/$config.all" >"$results/$config.all.new"
    mv "$results/$config.all.new" "$results/$config.all"
  done <"$results/$config.failed"
done

# --- Report -------------------------------------------------------------------------------------------------
# counts CONFIG MODULE: "passed/failed/skipped" of MODULE under CONFIG (skipped: skip and xfail), and what
# ended its run otherwise than with a verdict (a crash's signal, a timeout, a collection error).
counts() {
  status=$(cat "$results/$1/$(name "$2").status" 2>/dev/null || echo none)
  grep -F "$2::" "$results/$1.all" | awk -F '\t' -v status="$status" '
    $2 == "pass" { p++ } $2 == "fail" { f++ } $2 == "skip" || $2 == "xfail" { s++ }
    END { end = status == 0 || status == 1 ? "" : status == 124 || status == 137 ? " (hung)" : " (exit " status ")"
          printf "%d/%d/%d%s", p, f, s, end }'
}
echo "# each module's passed/failed/skipped tests under $python ($("$python" -c 'import platform; print(platform.python_version())'), numpy $("$python" -c 'import numpy; print(numpy.__version__)'), glibc $(ldd --version | sed -n '1s/.* //p')), then with $library preloaded"
printf '%-52s %-18s %-18s %-18s\n' module glibc library "library, min 1, PYTHONMALLOC=malloc"
for module in $modules; do
  printf '%-52s %-18s %-18s %-18s\n' "$module" "$(counts glibc "$module")" "$(counts default "$module")" "$(counts min1 "$module")"
done
echo
while IFS= read -r line; do echo "flaky, not counted: $line"; done <"$results/flaky"
for config in $python_configurations; do
  awk -F '\t' -v label="$(python_configuration_label "$config")" -v s="$(cat "$results/$config"/*.seconds | awk '{ t += $1 } END { print t }')" '
    $2 == "pass" { p++ } $2 == "fail" { f++ } $2 == "skip" || $2 == "xfail" { k++ }
    END { printf "%s: %d passed, %d failed, %d skipped; %d s of module runs\n", label, p, f, k, s }' "$results/$config.all"
done
# Regressions: a test that passed under glibc and failed, or has no outcome (its module's run crashed or hung
# before it, or it was not collected), under the library.
regressions=0
for config in default min1; do
  awk -F '\t' 'FILENAME == ARGV[1] { outcome[$1] = $2; next }
    { o = $1 in outcome ? outcome[$1] : "no outcome" } $2 == "pass" && o != "pass" { print $1 "\t" o }' \
    "$results/$config.all" "$results/glibc.all" >"$results/$config.regressions"
  n=$(wc -l <"$results/$config.regressions")
  [ "$n" -gt 0 ] || continue
  regressions=$((regressions + n))
  echo "--- $n tests pass under glibc and not under $(python_configuration_label "$config"):"
  head -n 50 "$results/$config.regressions"
  [ "$n" -le 50 ] || echo "... and $((n - 50)) more"
  for module in $modules; do
    grep -qF "$module::" "$results/$config.regressions" || continue
    echo "--- $module under the library ($config): pytest exit $(cat "$results/$config/$(name "$module").status"); the last lines it printed:"
    tail -n 40 "$results/$config/$(name "$module").log"
  done
done
echo "numpy-tests: $(echo $modules | wc -w) test modules under 3 configurations, $jobs runs at once, $seconds s; timeout $timeout s a run"
if [ "$regressions" -gt 0 ]; then
  trap - EXIT INT TERM
  echo "numpy-tests: $regressions tests pass under glibc and not under the library (output: $results)" >&2
  exit 1
fi

#!/bin/sh
# Other people's malloc tests in front of the preload library: glibc's own malloc tests (malloc/tst-*.c and
# mallocbug.c of the installed glibc's Debian source package, built against its own test support library
# and the installed glibc) and mimalloc's test-stress (Debian's mimalloc source package, built against plain
# malloc; 8 threads, scale 25, 20 rounds), and stress-ng's own checks (Debian's stress-ng, with --verify: its
# malloc, tree, list, search and sort stressors; and its poll, epoll, sleep, fork, clone, thread, timer and
# signal stressors, which go through the calls the library interposes), each run under plain glibc, then with
# LIBRARY preloaded at the default threshold and at TENSORPOOL_TEST_MIN_BYTES=1 (every allocation through the
# pool: the tests' setting for a threshold below the pool's floor, which TENSORPOOL_MIN_BYTES refuses).
# Every test that passes under glibc must pass under the library: the script exits 1 otherwise, and prints a
# row per test and a line per configuration.
# The tests of glibc's own chunk format (a corrupted chunk size or tcache pointer must abort) are also run
# under each replacement allocator installed (mimalloc, jemalloc, tcmalloc: Debian's libmimalloc2.0,
# libjemalloc2 and libtcmalloc-minimal4, installed here when missing and this is root): one that fails
# under the library at 1 byte is a known difference only where it fails under every one of them too.
#
# No third-party source enters the repository: the source packages are fetched with `apt-get source`
# through a private apt configuration (deb-src entries for this Debian release; the system's is not
# changed) and built in PEER_TESTS_CACHE (default /var/cache/tensorpool-peer-tests when writable, else
# ~/.cache/tensorpool-peer-tests), where they are kept for the next run. glibc's tests are built without
# glibc's build system: its support/ library is compiled with the few definitions that build would give it,
# against the installed headers; the tests that need a glibc build (internal compat symbols, static links)
# are listed as skipped, with the reason. 5-6 minutes on 2 cores (a hang waits out its timeout), of which
# the download (~20 MB) and build take ~40 s on a fresh cache.
#
#   usage: sh scripts/peer-malloc-tests.sh [--help] [LIBRARY]   (npm run test:peer-malloc)
#   LIBRARY defaults to build/Release/tensorpool-preload.so; another branch's build can be given.
#
# Environment: PEER_TESTS_CACHE (above); PEER_TESTS_TIMEOUT, seconds per test run (default 240); glibc's
# test driver has its own timeout, 20 s unless the test sets it, doubled here (TIMEOUTFACTOR=2) in every
# configuration: under the library at 1 byte, tst-dynarray-fail (90 s) runs with libc_malloc_debug.so's
# mtrace on, which then also writes a line for each allocation of the pool's own bookkeeping (64 s alone
# on 2 cores, 91 s beside another test run; glibc 4 s); PEER_TESTS_JOBS, tests run at once (default: the
# number of CPUs); PEER_TESTS_ONLY, an extended regular expression: only the tests whose names match.
# The logs of a run with a regression are kept (the last line names their directory).
set -eu
. "$(dirname "$0")/lib/library-argument.sh"  # --help, LIBRARY: sets repo and library
timeout=${PEER_TESTS_TIMEOUT:-240}
jobs=${PEER_TESTS_JOBS:-$(nproc)}
. "$(dirname "$0")/lib/debian-source.sh"  # sets cache; fetch, fetch_any
started=$(date +%s)
# One fetch and build at a time per cache (runs against several builds may start together).
exec 9>"$cache/lock"
flock 9
# The tests run with nothing of the caller's preloading or pool settings.
unset LD_PRELOAD
for name in $(env | sed -n 's/^\(TENSORPOOL_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$name"; done

# --- Sources: apt-get source through a private configuration, into the cache -------------------------------
# apt-get source unpacks with dpkg-source (dpkg-dev), installed here when missing and this is root.
# The replacement allocators that the peer-checked tests (chunk format, address space limit) also run under, likewise.
multiarch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
peer_libs="mimalloc:/usr/lib/$multiarch/libmimalloc.so.2 jemalloc:/usr/lib/$multiarch/libjemalloc.so.2 tcmalloc:/usr/lib/$multiarch/libtcmalloc_minimal.so.4"
missing=$(source_tools_missing)
command -v stress-ng >/dev/null 2>&1 || missing="$missing stress-ng"
for peer in $peer_libs; do
  [ -f "${peer#*:}" ] && continue
  case ${peer%%:*} in mimalloc) missing="$missing libmimalloc2.0" ;; jemalloc) missing="$missing libjemalloc2" ;; tcmalloc) missing="$missing libtcmalloc-minimal4" ;; esac
done
if [ -n "$missing" ] && [ "$(id -u)" -eq 0 ]; then
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null 2>&1 ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing; } >/dev/null 2>&1 || true
fi
peers=
for peer in $peer_libs; do [ -f "${peer#*:}" ] && peers="$peers $peer"; done
for tool in dpkg-query dpkg-source apt-get gcc flock timeout; do
  command -v "$tool" >/dev/null 2>&1 || { echo "peer-malloc-tests: needs $tool (Debian with apt-get, dpkg-dev and gcc)" >&2; exit 2; }
done
glibc_version=$(dpkg-query -W -f='${source:Version}' libc6)
fetch glibc "$glibc_version" || { echo "peer-malloc-tests: apt-get source glibc=$glibc_version failed" >&2; exit 2; }
mimalloc_version=$(fetch_any mimalloc) || { echo "peer-malloc-tests: apt-get source mimalloc failed" >&2; exit 2; }
glibc=$cache/src/glibc-$glibc_version
mimalloc=$cache/src/mimalloc-$mimalloc_version

# --- Build, outside the repository; kept per glibc version and version of this script ----------------------
build=$cache/build/glibc-$glibc_version-$(sha256sum "$0" | cut -c1-12)
if [ ! -f "$build/done" ]; then
  rm -rf "$cache/build"
  mkdir -p "$build/inc" "$build/support" "$build/malloc"
  # The include path glibc's build would give: <support/...> and <malloc/...> from the source tree, the
  # internal headers support/ and the tests use that stand alone, and shim.h for what libc-symbols.h does.
  ln -s "$glibc/support" "$build/inc/support"
  ln -s "$glibc/malloc" "$build/inc/malloc"
  for header in include/intprops.h include/array_length.h include/libc-diag.h include/libc-pointer-arith.h \
      include/scratch_buffer.h include/alloc_buffer.h sysdeps/generic/malloc-size.h "sysdeps/$(uname -m)/stackinfo.h"; do
    [ -f "$glibc/$header" ] && ln -s "$glibc/$header" "$build/inc/"
  done
  : >"$build/inc/config.h"
  printf '%s\n' '#define libc_hidden_proto(...)' '#include <limits.h>' >"$build/inc/shim.h"
  cflags="-O2 -w -D_GNU_SOURCE -DTIMEOUTFACTOR=1 -DTEST_NO_MALLOPT -I$build/inc -include $build/inc/shim.h"
  routines=$(sed -n '/^libsupport-routines *=/,/^$/p' "$glibc/support/Makefile" | tr -d '\\' | sed 's/^libsupport-routines *=//' | xargs)
  export cflags build glibc
  # support_paths.c takes the installation's paths from the build; the rest compile as they are. A routine
  # that does not compile outside glibc's tree is left out: a test that needs it fails to link, and is
  # listed as skipped with the linker's message.
  (cd "$glibc/support" && gcc $cflags -c -o "$build/support/support_paths.o" support_paths.c \
    "-DSRCDIR_PATH=\"$glibc\"" "-DOBJDIR_PATH=\"$build\"" '-DOBJDIR_ELF_LDSO_PATH="/lib64/ld-linux-x86-64.so.2"' \
    '-DINSTDIR_PATH="/usr"' "-DLIBDIR_PATH=\"/usr/lib/$(gcc -print-multiarch)\"" '-DBINDIR_PATH="/usr/bin"' \
    '-DSBINDIR_PATH="/usr/sbin"' "-DSLIBDIR_PATH=\"/lib/$(gcc -print-multiarch)\"" '-DROOTSBINDIR_PATH="/sbin"' \
    '-DCOMPLOCALEDIR_PATH="/usr/lib/locale"')
  printf '%s\n' $routines | grep -vx support_paths | (cd "$glibc/support" && xargs -P "$jobs" -I{} sh -c \
    'gcc $cflags -I. -c -o "$build/support/{}.o" {}.c 2>"$build/support/{}.err" || rm -f "$build/support/{}.o"')
  ar rcs "$build/libsupport.a" "$build"/support/*.o
  # The interposition tests link a malloc of their own (tst-interpose-aux*.c) into the program.
  for aux in tst-interpose-aux-nothread tst-interpose-aux-thread; do
    (cd "$glibc/malloc" && gcc $cflags -I. -c -o "$build/malloc/$aux.o" "$aux.c" 2>"$build/malloc/$aux.err") || true
  done
  (cd "$glibc/malloc" && ls mallocbug.c tst-*.c | sed 's/\.c$//' | grep -v -e '^tst-interpose-aux' -e '^tst-interpose-skeleton$') >"$build/tests"
  (cd "$glibc/malloc" && xargs -P "$jobs" -I{} sh -c \
    'extra=; case {} in tst-interpose-nothread|tst-interpose-thread) extra=$build/malloc/tst-interpose-aux-${0#tst-interpose-}.o ;; esac
     gcc $cflags -I. -o "$build/malloc/{}" {}.c $extra "$build/libsupport.a" -lpthread 2>"$build/malloc/{}.err" || rm -f "$build/malloc/{}"' {}) <"$build/tests"
  gcc -O2 -w -DUSE_STD_MALLOC -I"$mimalloc/include" -o "$build/test-stress" "$mimalloc/test/test-stress.c" -lpthread
  touch "$build/done"
fi
flock -u 9
built=$(date +%s)

# --- What glibc's build gives each test: its environment (malloc/Makefile's <test>-ENV), or why it is skipped
libc_malloc_debug=$(gcc -print-file-name=libc_malloc_debug.so)
sed -e ':a' -e '/\\$/N; s/\\\n[[:space:]]*/ /; ta' "$glibc/malloc/Makefile" | sed -n 's/^\(tst-[a-z0-9_-]*\)-ENV *= *\(.*\)$/\1 \2/p' |
  sed -e "s,\$(objpfx)/*libc_malloc_debug.so,$libc_malloc_debug,g" -e "s,\$(objpfx),$build/malloc/,g" >"$build/env"
test_env() { sed -n "s/^$1 //p" "$build/env"; }
skip_reason() {
  case $1 in
    tst-interpose-static-*) echo "a static program: LD_PRELOAD does not apply (tst-interpose-${1#tst-interpose-static-} is the same test, dynamic)" ;;
    tst-compathooks-*|tst-mallocstate) echo "binds glibc's compat symbols (__malloc_hook, malloc_get_state) through glibc-internal headers: needs a glibc build" ;;
    tst-mtrace) echo "run by tst-mtrace.sh to test libc_malloc_debug's mtrace output, not malloc" ;;
    *) [ -x "$build/malloc/$1" ] || echo "does not build outside glibc's tree: $(grep -m 1 -e 'error' "$build/malloc/$1.err" | sed 's,^.*/,,')" ;;
  esac
}

# Tests of glibc's own chunk format: they corrupt a freed chunk's size word (tst-malloc-backtrace) or a
# tcache or fastbin pointer (tst-safe-linking) and expect glibc's abort. With every block from the pool
# (TENSORPOOL_TEST_MIN_BYTES=1) there is no glibc chunk to corrupt; each is also run under every replacement
# allocator installed, and a failure under the library is a known difference only where it failed under all.
chunk_format_tests="tst-malloc-backtrace tst-safe-linking"
# A test that sets RLIMIT_AS 2 MiB above what the process maps, fills that with blocks and expects glibc's
# answers at the edge: which requests fail while it is full, and that once all is freed a block of another
# size is served. An allocator of size classes answers some differently (the pool's with TENSORPOOL_TEST_MIN_BYTES=1
# holds freed address space in the freed sizes' own pages; mimalloc, jemalloc and tcmalloc serve a request
# glibc refused). Checked the same way: a known difference only where every replacement allocator failed it.
address_space_tests="tst-dynarray-fail"
peer_checked_tests="$chunk_format_tests $address_space_tests"

# Where the library is known to differ from glibc, and why: printed with the results, never counted as passes.
known_difference() {
  [ "$1" = min1 ] || return 0
  what=
  case " $chunk_format_tests " in *" $2 "*) what="a test of glibc's own chunk format" ;; esac
  case " $address_space_tests " in *" $2 "*) what="a test of glibc's answers at the edge of a 2 MiB address space limit" ;; esac
  [ -n "$what" ] || return 0
  measured=
  for peer in $peers; do
    [ "$(cat "$results/peer-${peer%%:*}/$2.status" 2>/dev/null)" = fail ] || return 0
    measured="$measured${measured:+, }${peer%%:*}"
  done
  [ -z "$measured" ] || echo "$what: fails under every replacement allocator ($measured measured)"
}

# --- Run: each test under glibc, then under the library at the default threshold and at 1 byte -------------
results=$(mktemp -d "${TMPDIR:-/tmp}/peer-malloc-tests.XXXXXX")
trap 'rm -rf "$results"' EXIT INT TERM
: >"$results/skipped"
while read -r name; do
  reason=$(skip_reason "$name")
  if [ -n "$reason" ]; then echo "$name: $reason" >>"$results/skipped"; else echo "glibc/$name"; fi
done <"$build/tests" >"$results/list"
echo "mimalloc/test-stress" >>"$results/list"
if command -v stress-ng >/dev/null 2>&1; then printf '%s\n' stress-ng/memory stress-ng/waits >>"$results/list"
else echo "stress-ng: not installed (Debian: apt-get install stress-ng, as root)" >>"$results/skipped"; fi
if [ -n "${PEER_TESTS_ONLY:-}" ]; then grep -E -- "$PEER_TESTS_ONLY" "$results/list" >"$results/only" || true; mv "$results/only" "$results/list"; fi
# run CONFIG [LIST]: every test of LIST (default: every listed test) under CONFIG (glibc, default, min1, or
# peer-NAME: the replacement allocator NAME preloaded instead of the library); writes
# $results/CONFIG/<test>.{log,status}.
run() {
  config=$1
  mkdir -p "$results/$config"
  peer_lib=
  for peer in $peers; do [ "$config" = "peer-${peer%%:*}" ] && peer_lib=${peer#*:}; done
  export config results build library timeout peer_lib
  xargs -P "$jobs" -I{} sh -c '
    name=${0##*/}
    case $config in
      glibc) preload= ; min= ;;
      default) preload=$library; min= ;;
      min1) preload=$library; min=1 ;;
      peer-*) preload=$peer_lib; min= ;;
    esac
    case $0 in
      mimalloc/test-stress) set -- "$build/test-stress" 8 25 20; extra= ;;
      stress-ng/memory) set -- stress-ng --malloc 2 --malloc-pthreads 2 --malloc-bytes 1M --malloc-touch --tree 1 --list 1 \
        --skiplist 1 --tsearch 1 --hsearch 1 --mergesort 1 --heapsort 1 --radixsort 1 --verify -t 15s; extra= ;;
      stress-ng/waits) set -- stress-ng --poll 1 --epoll 1 --sleep 1 --nanosleep 1 --fork 1 --vfork 1 --clone 1 --pthread 1 \
        --sigsuspend 1 --timer 1 --signal 1 --sigq 1 --sigpending 1 --alarm 1 --verify -t 15s; extra= ;;
      *) set -- "$build/malloc/$name"; extra=$(sed -n "s/^$name //p" "$build/env") ;;
    esac
    case $extra in *LD_PRELOAD=*) preload="${preload:+$preload:}$(echo "$extra" | sed "s/.*LD_PRELOAD=\([^ ]*\).*/\1/")";; esac
    extra=$(echo "$extra" | sed "s/LD_PRELOAD=[^ ]*//")
    dir=$(mktemp -d "$results/$config/$name.XXXXXX")
    log=$results/$config/$name.log
    status=0
    start=$(date +%s.%N)
    (cd "$dir" && TMPDIR=$dir TIMEOUTFACTOR=2 timeout -k 5 "$timeout" env $extra ${preload:+LD_PRELOAD=$preload} ${min:+TENSORPOOL_TEST_MIN_BYTES=$min} "$@") >"$log" 2>&1 || status=$?
    case $status in
      0) verdict=pass ;;
      77) verdict=unsupported ;;
      124|137) verdict=hang ;;
      *) if grep -q "^Timed out" "$log"; then verdict=hang; else verdict=fail; fi ;;
    esac
    [ "$status" -gt 128 ] && [ "$verdict" = fail ] && verdict="fail:$(kill -l $((status - 128)) 2>/dev/null || echo $status)"
    echo "$verdict" >"$results/$config/$name.status"
    echo "$start $(date +%s.%N)" | awk "{ printf \"%.1f\", \$2 - \$1 }" >"$results/$config/$name.seconds"
    rm -rf "$dir"
  ' {} <"${2:-$results/list}"
}
for config in glibc default min1; do run "$config"; done
for test in $peer_checked_tests; do grep -x "glibc/$test" "$results/list" || true; done >"$results/peer-checked"
for peer in $peers; do [ -s "$results/peer-checked" ] && run "peer-${peer%%:*}" "$results/peer-checked"; done
finished=$(date +%s)

# --- Report -------------------------------------------------------------------------------------------------
verdict() { cat "$results/$1/${2##*/}.status"; }
cell() { echo "$(verdict "$1" "$2") $(cat "$results/$1/${2##*/}.seconds")s"; }
echo "# each test's verdict and wall time under glibc, then with $library preloaded"
printf '%-36s %-16s %-18s %-18s\n' test glibc "library" "library, min 1"
regressions=0
while read -r test; do
  g=$(verdict glibc "$test"); d=$(verdict default "$test"); m=$(verdict min1 "$test")
  mark=
  for config in default min1; do
    c=$(verdict "$config" "$test")
    [ "$g" = pass ] && [ "$c" != pass ] || continue
    if [ -n "$(known_difference "$config" "${test##*/}")" ]; then mark="$mark  <- known difference ($config)"
    else mark="$mark  <- regression ($config)"; regressions=$((regressions + 1)); fi
  done
  printf '%-36s %-16s %-18s %-18s%s\n' "$test" "$(cell glibc "$test")" "$(cell default "$test")" "$(cell min1 "$test")" "$mark"
done <"$results/list"
echo
while read -r line; do echo "skipped: $line"; done <"$results/skipped"
while read -r test; do
  line=
  for peer in $peers; do line="$line${line:+, }${peer%%:*} $(verdict "peer-${peer%%:*}" "$test")"; done
  echo "$test under the replacement allocators: ${line:-none installed}"
done <"$results/peer-checked"
for test in $(cat "$results/list"); do
  g=$(verdict glibc "$test")
  [ "$g" = pass ] || [ "$g" = unsupported ] || echo "glibc $glibc_version fails $test itself: $(grep -v '^$' "$results/glibc/${test##*/}.log" | tail -n 1)"
done
for config in glibc default min1; do
  case $config in glibc) label="glibc $glibc_version" ;; default) label="$library (default threshold)" ;; min1) label="$library (TENSORPOOL_TEST_MIN_BYTES=1)" ;; esac
  passed=$(cat "$results/$config"/*.status | grep -cx pass || true)
  unsupported=$(cat "$results/$config"/*.status | grep -cx unsupported || true)
  failed=$(($(wc -l <"$results/list") - passed - unsupported))
  echo "$label: $passed passed, $failed failed, $unsupported unsupported"
done
for config in default min1; do
  for test in $(cat "$results/list"); do
    if [ "$(verdict glibc "$test")" = pass ] && [ "$(verdict "$config" "$test")" != pass ]; then
      known=$(known_difference "$config" "${test##*/}")
      [ -z "$known" ] || { echo "--- $test under the library ($config): $(verdict "$config" "$test"), a known difference: $known"; continue; }
      echo "--- $test under the library ($config): $(verdict "$config" "$test"); its output's last lines:"
      tail -n 8 "$results/$config/${test##*/}.log"
    fi
  done
done
echo "peer-malloc-tests: $(wc -l <"$results/list") tests, $(wc -l <"$results/skipped") skipped; sources and build $((built - started)) s, runs $((finished - built)) s (glibc $glibc_version, mimalloc $mimalloc_version, cache $cache)"
if [ "$regressions" -gt 0 ]; then
  trap - EXIT INT TERM
  echo "peer-malloc-tests: $regressions tests pass under glibc and not under the library (logs: $results)" >&2
  exit 1
fi

#!/bin/sh
# The instructions the process pool's hot path executes, counted by cachegrind (valgrind) rather than timed:
# a malloc and a free of blocks its free spans hold (256 KiB, 100 KiB, 1 MiB, 300 KiB in turn), under the
# preload library, for one build or several. Counts do not move with a loaded machine, and with decay off (no
# clock decides what runs) runs of one build agree to the instruction: what a change costs the path (a probe's
# nop, a counter kept elsewhere) shows as it is.
#
#   usage: sh bench/hot-path-instructions.sh [LIBRARY...]   (default: build/Release/tensorpool-preload.so)
#
# For each library: instructions per malloc/free pair (a run of 200,000 pairs less one of 100,000: start-up
# cancels); for each after the first, the functions whose count per pair differs from the first's. To see
# what a branch costs: build main, copy its library aside, build the branch, then
#   sh bench/hot-path-instructions.sh /tmp/main-preload.so build/Release/tensorpool-preload.so
set -eu
case "${1-}" in -h|--help) exec sh "$(dirname "$0")/../scripts/usage.sh" "$0" ;; esac
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "hot-path-instructions.sh: valgrind is not installed (apt-get install valgrind)" >&2; exit 2; }
[ $# -gt 0 ] || set -- build/Release/tensorpool-preload.so
for library in "$@"; do [ -f "$library" ] || { echo "hot-path-instructions.sh: no library at $library" >&2; exit 2; }; done

work=$(mktemp -d /tmp/tp-hot-path.XXXXXX)
trap 'rm -rf "$work"' EXIT
cat > "$work/hot.c" <<'EOF'
#include <stdlib.h>
int main(int argc, char** argv) {
  const long n = atol(argv[1]);
  static const size_t sizes[4] = {256 << 10, 100 << 10, 1 << 20, 300 << 10};
  for (long i = 0; i < n; i++) {
    char* volatile p = malloc(sizes[i & 3]);
    p[0] = 1;
    free(p);
  }
  return 0;
}
EOF
cc -O2 -o "$work/hot" "$work/hot.c"

# cachegrind's output file of `pairs` pairs under `library`, and its total instruction count on stdout.
count() {
  TENSORPOOL_DECAY_MS=off LD_PRELOAD="$1" valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file="$3" "$work/hot" "$2" 2>&1 \
    | sed -n 's/.*I *refs: *//p' | tr -d ','
}
# Instructions by function of a cachegrind file, one "function<TAB>count" a line, sorted by function (the
# build's directory left out of the file's path, so that two builds' functions match).
functions() {
  cg_annotate "$1" 2>/dev/null | awk '/file:function/{f=1;next} /Auto-annotated source/{f=0} f' | grep -E '^ *[0-9,]+ \(' \
    | sed 's/,//g; s/([^)]*%) *//; s|[^ ]*/native/|native/|' | awk '{n=$1; $1=""; sub(/^ /,""); print $0 "\t" n}' | sort -t "$(printf '\t')" -k1,1
}

i=0
for library in "$@"; do
  i=$((i + 1))
  small=$(count "$library" 100000 "$work/small.$i")
  large=$(count "$library" 200000 "$work/large.$i")
  echo "$library: $(( (large - small) / 100000 )) instructions a malloc/free pair"
  functions "$work/large.$i" > "$work/functions.$i"
  functions "$work/small.$i" > "$work/functions-small.$i"
  if [ "$i" -gt 1 ]; then
    # Per pair: (large - small) of this library less that of the first, by function.
    join -t "$(printf '\t')" -a1 -a2 -e0 -o0,1.2,2.2 "$work/functions.1" "$work/functions.$i" > "$work/l"
    join -t "$(printf '\t')" -a1 -a2 -e0 -o0,1.2,2.2 "$work/functions-small.1" "$work/functions-small.$i" > "$work/s"
    join -t "$(printf '\t')" -a1 -a2 -e0 -o0,1.2,1.3,2.2,2.3 "$work/l" "$work/s" \
      | awk -F '\t' '{d = (($3 - $2) - ($5 - $4)) / 100000; if (d > 0.005 || d < -0.005) printf "  %+.2f  %s\n", d, substr($1, 1, 140)}' | sort -n
  fi
done

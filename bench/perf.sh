#!/bin/sh
# Profiles a trace replay with perf: page-fault counts per allocator (perf stat), then a call-graph profile
# of the tensorpool replay (perf record -g; the addon keeps frame pointers and symbols) and its top symbols.
#
#   usage: sh bench/perf.sh [trace] [reps]        (default: the bundled resnet18 trace, 10 repetitions)
#
# Software events (page-faults, minor-faults, major-faults, task-clock) work in VMs where hardware counters
# do not. perf counts the whole command: node's own start-up (~10k faults) is in every line.
set -eu
case "${1-}" in -h|--help) exec sh "$(dirname "$0")/../scripts/usage.sh" "$0" ;; esac
cd "$(dirname "$0")/.."
trace=${1:-traces/resnet18_train.csv.gz}
reps=${2:-10}
command -v perf >/dev/null || { echo "perf.sh: perf is not installed (apt-get install linux-perf)" >&2; exit 2; }
[ -f dist/cli/main.js ] || npm run build >/dev/null

events=page-faults,minor-faults,major-faults,task-clock
for allocator in tensorpool malloc jemalloc mimalloc tcmalloc; do
  echo "== perf stat: $allocator"
  perf stat -e "$events" -- node dist/cli/main.js replay "$trace" --allocators "$allocator" --reps "$reps" 2>&1 >/dev/null \
    | grep -E 'page-faults|minor-faults|major-faults|task-clock|not installed|seconds time elapsed' || true
done

data=$(mktemp /tmp/tensorpool-perf.XXXXXX)
# Five times the repetitions, so the replay loop outweighs node's own start-up in the profile.
echo "== perf record -g: tensorpool replay, $((reps * 5)) repetitions; top symbols (self time)"
perf record -q -g -o "$data" -- node dist/cli/main.js replay "$trace" --allocators tensorpool --reps $((reps * 5)) >/dev/null 2>&1
perf report -i "$data" --stdio --no-children --sort dso,symbol --percent-limit 0.5 -g none 2>/dev/null \
  | grep -E '^ +[0-9]' | sed -e 's/[[:space:]]*-[[:space:]]*-[[:space:]]*$//' -e 's/[[:space:]]*$//' | head -25
rm -f "$data"

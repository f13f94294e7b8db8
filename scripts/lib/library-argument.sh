# Sourced (". scripts/lib/library-argument.sh") at the top of a script that runs tests in front of the preload
# library, with the script's arguments: answers --help with the script's header comment (its lines from the
# second to `set -eu`), accepts at most one argument, LIBRARY (default build/Release/tensorpool-preload.so of
# this repository), and sets `repo` (the repository's root) and `library` (LIBRARY's absolute path; the script
# exits 2 where there is none).
script_name=$(basename "$0" .sh)
usage="usage: scripts/$script_name.sh [--help] [LIBRARY]   (default LIBRARY: build/Release/tensorpool-preload.so)"
case "${1:-}" in
  -h|--help) sed -n '2,/^set -eu/p' "$0" | sed -e '/^set -eu/d' -e 's/^# \{0,1\}//'; exit 0 ;;
  -*) echo "$usage" >&2; exit 2 ;;
esac
[ $# -le 1 ] || { echo "$usage" >&2; exit 2; }
repo=$(cd "$(dirname "$0")/.." && pwd)
library=${1:-$repo/build/Release/tensorpool-preload.so}
[ -f "$library" ] || { echo "$script_name: no library at $library (build it: npm run build:native)" >&2; exit 2; }
library=$(cd "$(dirname "$library")" && pwd)/$(basename "$library")

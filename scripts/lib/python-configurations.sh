# Sourced by a script that runs Python tests under plain glibc and under the preload library (python-tests.sh,
# numpy-tests.sh), after library-argument.sh and after the script has read its own settings (PYTHON_TESTS_*
# are cleared here). It clears the caller's preloading, pool and Python settings from the environment (the
# tests run with none of them: PYTHONUNBUFFERED, for one, fails test_cmd_line's buffering test under glibc
# itself), and defines:
#   python_configurations         the three configurations, in the order they are reported: glibc, default
#                                 (as `tensorpool run` runs Python: LIBRARY in LD_PRELOAD, the sitecustomize
#                                 of hooks/python first on PYTHONPATH) and min1 (the same at
#                                 TENSORPOOL_TEST_MIN_BYTES=1, the tests' threshold below the floor, with
#                                 PYTHONMALLOC=malloc: every allocation of the
#                                 interpreter, its objects included, through the pool)
#   python_hooks DIR              copies hooks/python to DIR/hooks, where the interpreter writes its bytecode
#                                 (never in the repository); python_environment puts it on PYTHONPATH
#   python_environment CONFIG [PATH]  CONFIG's environment as words for env(1) (NAME=value ...); PATH, more
#                                 directories for PYTHONPATH (after the hook's)
#   python_configuration_label CONFIG  how a report names CONFIG
#   skipped WHY                   says that the run is skipped and why, and exits 0 (a host without the tests)
#   need_tools TOOL...            exits 2, naming the first TOOL missing
#   debian_install PACKAGE...     installs Debian packages where this is root with apt-get (`apt-get update`
#                                 only if the install fails first); says nothing, fails nothing: the caller
#                                 checks what it needs afterwards
unset LD_PRELOAD
for name in $(env | sed -n 's/^\(TENSORPOOL_[A-Za-z0-9_]*\)=.*/\1/p; s/^\(PYTHON[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$name"; done

python_configurations="glibc default min1"
python_hooks() {
  cp -R "$repo/hooks/python" "$1/hooks"
  python_hooks_dir=$1/hooks
}
python_environment() {
  case $1 in
    glibc) echo ${2:+PYTHONPATH=$2} ;;
    default) echo "LD_PRELOAD=$library PYTHONPATH=$python_hooks_dir${2:+:$2}" ;;
    min1) echo "LD_PRELOAD=$library PYTHONPATH=$python_hooks_dir${2:+:$2} TENSORPOOL_TEST_MIN_BYTES=1 PYTHONMALLOC=malloc" ;;
  esac
}
python_configuration_label() {
  case $1 in
    glibc) echo "glibc" ;;
    default) echo "$library (default threshold)" ;;
    min1) echo "$library (TENSORPOOL_TEST_MIN_BYTES=1, PYTHONMALLOC=malloc)" ;;
  esac
}
debian_install() {
  [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1 || return 0
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null 2>&1 ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"; } >/dev/null 2>&1 || true
}
skipped() {
  echo "$script_name: skipped, nothing run: $1"
  exit 0
}
need_tools() {
  for tool; do command -v "$tool" >/dev/null 2>&1 || { echo "$script_name: needs $tool" >&2; exit 2; }; done
}

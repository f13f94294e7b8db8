# Sourced (". scripts/lib/debian-source.sh") by what builds other people's code from Debian source packages
# (scripts/peer-malloc-tests.sh, bench/small-objects.ts): no third-party source enters the repository. The
# packages are fetched with `apt-get source` through a private apt configuration (deb-src entries for this
# Debian release; the system's configuration is not changed) into a cache kept between runs.
#
# Sets `cache`: PEER_TESTS_CACHE, else /var/cache/tensorpool-peer-tests where writable, else
# ~/.cache/tensorpool-peer-tests (made here). Defines:
#   fetch PACKAGE [VERSION]       the unpacked source (Debian patches applied) in $cache/src/PACKAGE-VERSION
#                                 (VERSION empty: the newest apt knows, then in $cache/src/PACKAGE-)
#   newest_source PACKAGE         the newest version of a source package in the private configuration
#   fetch_any PACKAGE             the version already in the cache, else the newest (fetched): prints it
#   source_tools_missing          the Debian packages a fetch needs that are not installed (dpkg-dev)
# The caller takes $cache/lock (flock) around fetches and builds: runs against several builds may start together.
if [ -n "${PEER_TESTS_CACHE:-}" ]; then cache=$PEER_TESTS_CACHE
elif mkdir -p /var/cache/tensorpool-peer-tests 2>/dev/null && [ -w /var/cache/tensorpool-peer-tests ]; then cache=/var/cache/tensorpool-peer-tests
else cache=${XDG_CACHE_HOME:-$HOME/.cache}/tensorpool-peer-tests; fi
mkdir -p "$cache"
apt_options="-o Dir::Etc::SourceList=$cache/apt/sources.list -o Dir::Etc::SourceParts=/dev/null \
  -o Dir::State::Lists=$cache/apt/lists -o Dir::Cache=$cache/apt/cache -o APT::Sandbox::User=root"
apt_ready=
apt_update() {
  [ -z "$apt_ready" ] || return 0
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:?}")
  mkdir -p "$cache/apt/lists/partial" "$cache/apt/cache/archives/partial"
  {
    echo "deb-src http://deb.debian.org/debian $codename main"
    echo "deb-src http://deb.debian.org/debian $codename-updates main"
    echo "deb-src http://deb.debian.org/debian-security $codename-security main"
  } >"$cache/apt/sources.list"
  # shellcheck disable=SC2086
  apt-get -qq $apt_options update >/dev/null
  apt_ready=1
}
newest_source() {
  apt_update
  # shellcheck disable=SC2086
  apt-cache $apt_options showsrc "$1" | sed -n 's/^Version: //p' | sort -V | tail -n 1
}
fetch() {
  dir=$cache/src/$1-${2:-}
  [ -d "$dir" ] && return 0
  apt_update
  tmp=$(mktemp -d "$cache/fetch.XXXXXX")
  # shellcheck disable=SC2086
  (cd "$tmp" && apt-get -qq $apt_options source "$1${2:+=$2}" >/dev/null 2>"$tmp/log") || { cat "$tmp/log" >&2; rm -rf "$tmp"; return 1; }
  mkdir -p "$cache/src"
  mv "$(find "$tmp" -mindepth 1 -maxdepth 1 -type d | head -n 1)" "$dir"
  rm -rf "$tmp"
}
fetch_any() {
  version=$(ls -d "$cache/src/$1"-* 2>/dev/null | head -n 1 | sed "s,.*/$1-,,")
  if [ -z "$version" ]; then
    version=$(newest_source "$1")
    fetch "$1" "$version" || return 1
  fi
  echo "$version"
}
source_tools_missing() {
  command -v dpkg-source >/dev/null 2>&1 || echo dpkg-dev
}

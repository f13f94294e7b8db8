#!/bin/sh
# The prebuilt binaries the npm package ships (prebuilds/<platform>-<arch>/): the addon through prebuildify
# (N-API, stripped), and beside it the preload library that the same node-gyp build made.
#   usage: npm run build:prebuilds (sh scripts/build-prebuilds.sh), after the node-gyp build; npm pack runs it (prepack)
set -eu
case "${1-}" in -h|--help) exec sh "$(dirname "$0")/usage.sh" "$0" ;; esac
cd "$(dirname "$0")/.."
# prebuildify rebuilds, copies the libraries in build/Release beside the addon and moves the addon there. With
# its --strip it would strip them in build/Release first: the clone's own build stays as node-gyp made it (the
# symbols test/preload.test.ts reads, the addon that test/cli.test.ts copies), and only the package's copies
# are stripped.
npx prebuildify --napi
dir="prebuilds/$(node -p 'process.platform + "-" + process.arch')"
cp "$dir/tensorpool.node" build/Release/tensorpool.node
strip --strip-all "$dir/tensorpool.node" "$dir/tensorpool-preload.so"
echo "build:prebuilds: $(ls "$dir" | tr '\n' ' ')"

#!/bin/sh
# The prebuilt binaries the npm package ships (prebuilds/<platform>-<arch>/): the addon through prebuildify
# (N-API, stripped), and beside it the preload library that the same node-gyp build made.
#   usage: npm run prebuild (sh scripts/prebuild.sh), after the node-gyp build
set -eu
case "${1-}" in -h|--help) exec sh "$(dirname "$0")/usage.sh" "$0" ;; esac
cd "$(dirname "$0")/.."
npx prebuildify --napi --strip
dir="prebuilds/$(node -p 'process.platform + "-" + process.arch')"
cp build/Release/tensorpool-preload.so "$dir/tensorpool-preload.so"
strip --strip-unneeded "$dir/tensorpool-preload.so"
echo "prebuild: $(ls "$dir" | tr '\n' ' ')"

#!/bin/sh
# Builds the addon and the preload library from binding.gyp in a clone, incrementally: configured once, then
# `make` rebuilds what changed (a second run with nothing changed takes a second or two). npm start and npm
# test run it first; npm install does not (package.json has "gypfile": false, so that `npx tensorpool` in a
# clone, which installs the clone into npm's cache, does not rebuild the whole addon in place).
#   usage: sh scripts/build-addon.sh (what npm start and npm test run first); npm run build:native rebuilds all
set -eu
case "${1-}" in -h|--help) exec sh "$(dirname "$0")/usage.sh" "$0" ;; esac
cd "$(dirname "$0")/.."
# Configured again where binding.gyp or the source list changed since (a file added to native/sources.json).
if [ ! -f build/Makefile ] || [ binding.gyp -nt build/Makefile ] || [ native/sources.json -nt build/Makefile ]; then
  node-gyp configure
fi
node-gyp build --jobs max

#!/bin/sh
# Builds the core and its native unit tests with plain CMake and runs them through ctest.
#   usage: npm run test:native (sh scripts/native-tests.sh)
set -eu
case "${1-}" in -h|--help) exec sh "$(dirname "$0")/usage.sh" "$0" ;; esac
cd "$(dirname "$0")/.."
cmake -S . -B build-native -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-native -j "$(nproc)"
ctest --test-dir build-native --output-on-failure

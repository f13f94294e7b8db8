#!/bin/sh
# Builds the native core with AddressSanitizer + UndefinedBehaviorSanitizer (gcc's runtimes: libasan8,
# libubsan1) and runs the native unit tests; any report fails the run.
set -eu
cd "$(dirname "$0")/.."
cmake -S . -B build-asan -DTP_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build-asan -j "$(nproc)"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
./build-asan/tp_native_tests
echo "sanitize: native tests clean under ASan + UBSan"

#!/usr/bin/env bash
# Builds nns with AddressSanitizer + UndefinedBehaviorSanitizer into
# build-asan/ and runs the whole test suite under them, leak detection on.
# Any report fails the test that produced it. Third-party libraries that
# are not instrumented and keep memory until exit are named in
# scripts/lsan.supp (never our code).
#   scripts/sanitize.sh [CTEST ARGS...]     e.g. -R plan_ to run a subset
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNNS_SANITIZE=ON > /dev/null
cmake --build build-asan -j"$(nproc)"
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=0:detect_stack_use_after_return=0:strict_string_checks=1"
export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# Sanitized code runs 2-4x slower: ranks get longer to meet.
export NNS_SANITIZED=1
ctest --test-dir build-asan --output-on-failure -j"$(nproc)" "$@"

#!/usr/bin/env bash
# Builds nns with AddressSanitizer + UndefinedBehaviorSanitizer into
# build-asan/ and runs the whole test suite under them, leak detection on.
# Any report fails the test that produced it. Third-party libraries that
# are not instrumented and keep memory until exit are named in
# scripts/lsan.supp (never our code).
#   scripts/sanitize.sh [--reuse DIR] [CTEST ARGS...]     e.g. -R plan_ to run a subset
# --reuse DIR runs the suite from another sanitized build instead, brought
# up to date first: build-fuzz/ (scripts/fuzz.sh: clang, ASan + UBSan over
# every library and test, the same fatal-UB options) saves a second full
# instrumented build, about an hour on a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build-asan
if [ "${1:-}" = "--reuse" ]; then
  [ $# -ge 2 ] || { echo "usage: scripts/sanitize.sh [--reuse DIR] [CTEST ARGS...]" >&2; exit 64; }
  build=$2
  shift 2
  cache=$(cat "$build/CMakeCache.txt" 2>/dev/null || true)
  if ! grep -Eq '^NNS_(SANITIZE|FUZZ):BOOL=ON' <<<"$cache"; then
    echo "sanitize: $build is not a sanitized build (configure it with -DNNS_SANITIZE=ON, or scripts/fuzz.sh)" >&2
    exit 64
  fi
else
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNNS_SANITIZE=ON > /dev/null
fi
cmake --build "$build" -j"$(nproc)"
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=0:detect_stack_use_after_return=0:strict_string_checks=1"
export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# Sanitized code runs 2-4x slower: ranks get longer to meet.
export NNS_SANITIZED=1
ctest --test-dir "$build" --output-on-failure -j"$(nproc)" "$@"

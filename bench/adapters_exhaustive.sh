#!/usr/bin/env bash
# The exhaustive property checks of derived communication that the test
# suite samples (tests/plan/adapters_test.cpp, tag [exhaustive]): the
# one-collective shortcut and the A* bound against plain Dijkstra over
# every pair of layouts of 4 and 8 devices. About 2.5 minutes on a 2-core
# machine.
#   bench/adapters_exhaustive.sh          (build/ must be built)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec "$ROOT/build/tests/plan/nns_plan_tests" "[exhaustive]" -d yes

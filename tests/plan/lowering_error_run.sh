#!/usr/bin/env bash
# A lowering error that only the ranks' own lowering finds (kernel bodies:
# a dropout split along its second dim) is located at the plan's directive
# under `nns run`, as under `nns check --emit=program`: file:line:col, the
# source line and a caret, exit 70.
#   lowering_error_run.sh NNS_BINARY
set -uo pipefail
NNS="$1"
cd "$(dirname "$0")/../.."
f=tests/errors/plan_lowering_dropout_split_dim1.nns
out=$("$NNS" run "$f" --plan cols --gpus 2 --steps 1 2>&1); rc=$?
fail=0
[ "$rc" = 70 ] || { echo "FAIL: exit $rc, expected 70"; fail=1; }
grep -q "$f:13:15: error: .*dropout split other than along its first dim" <<<"$out" || { echo "FAIL: no located error"; fail=1; }
grep -q '^\[rank 0\] *\^' <<<"$out" || grep -q '^ *\^' <<<"$out" || { echo "FAIL: no caret line"; fail=1; }
[ $fail = 0 ] && echo PASS || echo "$out"
exit $fail

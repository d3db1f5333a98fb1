#!/usr/bin/env bash
# nns check runs the capacity check on a thread of its own beside program
# verification (driver/check_stage.cpp) and prints both afterwards in the
# order of a serial check. This test holds it to that: an overflow ends the
# check with 65 and nothing of verification is printed, not even a seeded
# bug's errors; without the overflow the same seeded bug gives 70 with the
# lines in order (verdict, memory, times, program) and its errors on stderr.
#   capacity_beside_verify.sh NNS
set -u
NNS="$1"
cd "$(dirname "$0")/../.."
fail=0
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
args=(check examples/gpt.nns --config tiny --plan megatron --gpus 2 --seed-bug missing-allreduce)

"$NNS" "${args[@]}" --device-memory 1MiB >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 65 ] || { echo "FAIL: overflow with a seeded bug: exit $rc, expected 65"; fail=1; }
grep -q "^  memory: peak .* of 1.00 MiB" "$tmp/out" || { echo "FAIL: overflow: no memory line"; fail=1; }
grep -q "needs .* at its peak .* but has 1.00 MiB" "$tmp/err" || { echo "FAIL: overflow: no overflow diagnostic"; fail=1; }
if grep -q "^program:" "$tmp/out" || grep -q "nns: error: program:" "$tmp/err"; then
  echo "FAIL: overflow: verification's report or errors were printed"
  fail=1
fi

"$NNS" "${args[@]}" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 70 ] || { echo "FAIL: seeded bug: exit $rc, expected 70"; fail=1; }
order="$(grep -oE '^(check:|  memory:|  times:|program: [0-9]|program: seeded)' "$tmp/out" | sed -E 's/[0-9]$/N/' | tr '\n' '|')"
[ "$order" = "check:|  memory:|  times:|program: seeded|program: N|" ] && [ "$(grep -c WRONG "$tmp/out")" -eq 1 ] ||
  { echo "FAIL: seeded bug: lines out of order or no WRONG verdict: $order"; cat "$tmp/out"; fail=1; }
grep -q "nns: error: program: .*missing allreduce" "$tmp/err" || { echo "FAIL: seeded bug: its error is not on stderr"; fail=1; }

[ "$fail" -eq 0 ] && echo PASS
exit "$fail"

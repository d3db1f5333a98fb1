#!/usr/bin/env bash
# The learning-rate horizon against the run's length: a run inside its
# horizon says nothing; a run past a pinned horizon (cosine_lr(steps = N))
# and a run with more than one step at lr 0 warn before the first step, and
# the rates they print agree with the warning.
#   lr_horizon.sh NNS_BINARY
set -euo pipefail
NNS="$1"
cd "$(dirname "$0")/.."
fail() { echo "FAIL: $*"; exit 1; }
pinned=tests/schedule/pinned_horizon.nns

# Inside the pinned horizon: no warning, and only the last step is at lr 0.
err=$("$NNS" run "$pinned" --steps 4 2>&1 >/dev/null)
[ -z "$err" ] || fail "a run inside its horizon warned: $err"

# Past it: both warnings, before the banner, and steps 4..6 print lr 0.
out=$("$NNS" run "$pinned" --steps 6 2>&1)
grep -q "warning: the schedule's horizon is pinned at 4 steps, shorter than this run's 6; steps 5 to 6" <<< "$out" ||
  fail "no pinned-horizon warning: $out"
grep -q "warning: 3 of this run's 6 steps train at learning rate 0" <<< "$out" || fail "no lr-0 warning: $out"
[ "$(grep -n 'warning' <<< "$out" | tail -1 | cut -d: -f1)" -lt "$(grep -n '^nns: training' <<< "$out" | cut -d: -f1)" ] ||
  fail "the warnings came after the banner: $out"
zeros=$(grep -c '^step .* lr 0 ' <<< "$out" || true)
[ "$zeros" = 3 ] || fail "expected 3 steps at lr 0, saw $zeros: $out"

# The train block's own horizon (no steps= in the schedule) follows --set
# steps=N: a run of 5 steps on a horizon of 3 trains 3 steps at lr 0.
out=$("$NNS" run examples/gpt.nns --config tiny --steps 5 --set steps=3 2>&1)
grep -q "warning: 3 of this run's 5 steps train at learning rate 0" <<< "$out" || fail "--set steps=3 --steps 5: $out"
grep -q "horizon is pinned" <<< "$out" && fail "an unpinned horizon was called pinned: $out"
echo PASS

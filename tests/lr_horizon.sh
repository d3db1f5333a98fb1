#!/usr/bin/env bash
# The learning-rate horizon against the run's length: a run inside its
# horizon says nothing; a run past a pinned horizon (cosine_lr(steps = N))
# and a run with more than one step at lr 0 warn before the first step, and
# the rates they print agree with the warning. An unpinned horizon is the
# run's step count (--steps, --set steps=N), kept by checkpoints on resume.
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

# An unpinned horizon is the run's step count: --set steps=N and --steps N
# give the same rates, a cosine over N steps (only step N at lr 0, and the
# rate falls every step after the warmup); no warning.
lrs() { sed -n 's/^step *[0-9]*\/[0-9]*  loss [0-9.]*  lr \([^ ]*\) .*/\1/p' <<< "$1"; }
set_out=$("$NNS" run examples/gpt.nns --config tiny --set steps=12 2>&1)
steps_out=$("$NNS" run examples/gpt.nns --config tiny --steps 12 2>&1)
grep -q "warning" <<< "$set_out$steps_out" && fail "a run over its own horizon warned: $set_out"
[ "$(lrs "$set_out" | wc -l)" = 12 ] || fail "--set steps=12 did not run 12 steps: $set_out"
[ "$(lrs "$set_out")" = "$(lrs "$steps_out")" ] || fail "--set steps=12 and --steps 12 differ in their rates"
[ "$(lrs "$set_out" | tail -1)" = 0 ] && [ "$(lrs "$set_out" | grep -c '^0$')" = 1 ] || fail "the schedule is not over 12 steps: $(lrs "$set_out" | tr '\n' ' ')"
lrs "$set_out" | tail -n +3 | awk 'NR > 1 && $1 >= prev { exit 1 } { prev = $1 }' || fail "the rate does not fall over 12 steps: $(lrs "$set_out" | tr '\n' ' ')"

# A checkpoint keeps the horizon: a 6-step run stopped after 3 and resumed
# with --steps 8 stays on the 6-step schedule (it says so and warns of
# steps 6 to 8 at lr 0); resumed with --steps 6 it equals the unbroken run.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$NNS" run examples/gpt.nns --config tiny --steps 6 --stop-after 3 --save "$tmp/ck.safetensors" > "$tmp/a.log" 2>&1 || fail "--stop-after 3: $(cat "$tmp/a.log")"
grep -q "^done: 3 steps" "$tmp/a.log" || fail "--stop-after 3 did not stop after step 3: $(cat "$tmp/a.log")"
out=$("$NNS" run examples/gpt.nns --config tiny --steps 8 --resume "$tmp/ck.safetensors" 2>&1)
grep -q "note: the learning-rate schedule keeps the checkpoint's horizon of 6 steps (this run's steps: 8" <<< "$out" || fail "no horizon note: $out"
grep -q "warning: 3 of this run's 8 steps train at learning rate 0" <<< "$out" || fail "no lr-0 warning on the kept horizon: $out"
whole=$("$NNS" run examples/gpt.nns --config tiny --steps 6 2>&1)
rest=$("$NNS" run examples/gpt.nns --config tiny --steps 6 --resume "$tmp/ck.safetensors" 2>&1)
grep -q "note:" <<< "$rest" && fail "a resume with the saved horizon's --steps printed a note: $rest"
[ "$(lrs "$rest")" = "$(lrs "$whole" | tail -3)" ] || fail "the resumed rates differ from the unbroken run's"
# A pinned horizon is the train block's word: it overrides the saved one.
"$NNS" run "$pinned" --steps 6 --stop-after 2 --save "$tmp/p.safetensors" > /dev/null 2>&1 || fail "pinned save"
pinned_whole=$("$NNS" run "$pinned" --steps 6 2>&1)
pinned_rest=$("$NNS" run "$pinned" --steps 6 --resume "$tmp/p.safetensors" 2>&1)
[ "$(lrs "$pinned_rest")" = "$(lrs "$pinned_whole" | tail -4)" ] || fail "the pinned resumed rates differ"
echo PASS

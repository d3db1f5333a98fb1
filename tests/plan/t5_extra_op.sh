#!/usr/bin/env bash
# Issue 26: "in T5, adding one op made `embedding#0` refer to a different
# op". A copy of examples/t5.nns (in a temp dir) gets one op early in the
# model: the encoder's embedding is scaled by 1.0 (a mul_scalar) before its
# dropout. That renumbers the positional names of the top level (the tied
# head's rescale, mul_scalar#0, becomes mul_scalar#1), but plan
# pipeline_by_structure, which selects by structure only, must put every
# original op on the same stage: its --emit=plan, op by op in execution
# order (positional suffixes dropped), equals the original's plus the new
# op, on 2 and 4 stages. The modified model's pipeline then --verifys on 2
# and 4 devices.
#   t5_extra_op.sh NNS_BINARY
set -uo pipefail
NNS="$1"
cd "$(dirname "$0")/../.."
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail=0

cp examples/t5.nns "$tmp/t5.nns"
sed 's/encoder(dropout(embedding(ids, shared), p = drop/encoder(dropout(embedding(ids, shared) * 1.0, p = drop/' \
  examples/t5.nns > "$tmp/t5_extra.nns"
if cmp -s "$tmp/t5.nns" "$tmp/t5_extra.nns"; then
  echo "FAIL: the sed found no encoder embedding to scale in examples/t5.nns"
  exit 1
fi

# "name device-list" per sub-op of the plan, in execution order, with the
# positional #k suffix of the op name dropped (names shift, stages must not).
stages_of() {  # FILE GPUS [PLAN]
  local out
  out="$("$NNS" check "$1" --config tiny --plan "${3:-pipeline_by_structure}" --gpus "$2" --emit=plan 2>&1)" ||
    { echo "CHECK FAILED: $out"; return 1; }
  awk '/^  [^ ]/ { name = $1; sub(/#[0-9]+$/, "", name) } /^    #[0-9]+ on / { print name, $3 }' <<<"$out"
}

for g in 2 4; do
  before="$(stages_of "$tmp/t5.nns" $g)" || { echo "FAIL: original t5 at $g: $before"; fail=1; continue; }
  after="$(stages_of "$tmp/t5_extra.nns" $g)" || { echo "FAIL: t5 with an extra op at $g: $after"; fail=1; continue; }
  n="$(wc -l <<<"$before")"
  if [ "$n" -lt 50 ]; then echo "FAIL: only $n sub-ops parsed from --emit=plan at $g"; fail=1; fi
  # Exactly one line added (the new op, on the first stage), none removed or moved.
  delta="$(diff <(echo "$before") <(echo "$after") | grep -E '^[<>]')"
  if [ "$delta" != "> mul_scalar [0]" ]; then
    echo "FAIL: on $g stages the extra op changed the stage of original ops (or landed elsewhere):"
    echo "$delta" | head -20
    fail=1
  fi
done

# The comparison has teeth: t5's hand-written plan `pipeline` selects the
# head's rescale as select("mul_scalar#*"), so the new op lands on the
# last stage there, not with the embedding it scales.
hand_before="$(stages_of "$tmp/t5.nns" 2 pipeline)" && hand_after="$(stages_of "$tmp/t5_extra.nns" 2 pipeline)"
hand_delta="$(diff <(echo "$hand_before") <(echo "$hand_after") | grep -E '^[<>]')"
if [ "$hand_delta" != "> mul_scalar [1]" ]; then
  echo "FAIL: expected the kind-selected hand-written pipeline to put the new op on stage 1, got: $hand_delta"
  fail=1
fi

# The positional name really did shift (else this test shows nothing).
names_of() { "$NNS" check "$1" --config tiny --plan pipeline_by_structure --gpus 2 --emit=plan 2>&1 | awk '/^  [^ ]/ { print $1 }'; }
orig_names="$(names_of "$tmp/t5.nns")"
extra_names="$(names_of "$tmp/t5_extra.nns")"
if ! grep -qx 'mul_scalar#0' <<<"$orig_names" || ! grep -qx 'mul_scalar#1' <<<"$extra_names" ||
  grep -qx 'mul_scalar#1' <<<"$orig_names"; then
  echo "FAIL: expected the head's mul_scalar#0 to become mul_scalar#1 with the extra op"
  fail=1
fi

for g in 2 4; do
  run="$("$NNS" run "$tmp/t5_extra.nns" --config tiny --gpus $g --plan pipeline_by_structure --steps 3 --verify 2>&1)"
  if ! grep -qE 'verify: largest relative error .*: PASS' <<<"$run"; then
    echo "FAIL: t5 with an extra op, pipeline_by_structure on $g devices does not verify:"
    tail -3 <<<"$run"
    fail=1
  else
    grep -E '^verify: ' <<<"$run" | sed "s/^/  $g stages: /"
  fi
done
[ $fail = 0 ] && echo "PASS: t5 with an extra op keeps every original op on its stage (2 and 4 stages) and verifies"
exit $fail

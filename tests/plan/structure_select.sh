#!/usr/bin/env bash
# Selection by model structure (docs/language.md, "Selecting ops by model
# structure"): what ops_of / after / before / between / pipeline_stages pick
# on tests/plan/plans/structure.nns (embedding linear#0, blocks 0..3, then
# tanh, the head linear#1 and the loss), and that the structural stages of
# gpt tiny_pipe lower exactly like its hand-written `pipeline` plan.
# Also: a plan leaving devices idle under --gpus N is a warning naming them.
#   structure_select.sh NNS_BINARY
set -uo pipefail
NNS="$1"
cd "$(dirname "$0")/../.."
out="$("$NNS" check tests/plan/plans/structure.nns --config small --plan show --gpus 2 2>&1)" || { echo "FAIL: plan show: $out"; exit 1; }
want='ops_of blocks[1:3]: [blocks.1.linear#0, blocks.1.gelu#0, blocks.1.add#0, blocks.2.linear#0, blocks.2.gelu#0, blocks.2.add#0]
ops_of blocks[3]: [blocks.3.linear#0, blocks.3.gelu#0, blocks.3.add#0]
ops_of blocks.0: 3
after blocks[3]: [tanh#0, linear#1, mse#0]
before blocks[0]: [linear#0]
between: [blocks.1.linear#0, blocks.1.gelu#0, blocks.1.add#0]
stage 0 [linear#0, blocks.0.linear#0, blocks.0.gelu#0, blocks.0.add#0, blocks.1.linear#0, blocks.1.gelu#0, blocks.1.add#0]
stage 1 [blocks.2.linear#0, blocks.2.gelu#0, blocks.2.add#0, blocks.3.linear#0, blocks.3.gelu#0, blocks.3.add#0, tanh#0, linear#1, mse#0]'
got="$(grep -E '^(ops_of|after|before|between|stage)[ :]' <<<"$out")"
fail=0
if [ "$got" != "$want" ]; then echo "FAIL: selections differ:"; diff <(echo "$want") <(echo "$got"); fail=1; fi
prog() {  # PLAN
  "$NNS" check examples/gpt.nns --config tiny_pipe --plan "$1" --gpus 2 --emit=program | sed "s/ of plan $1,/ of plan P,/"
}
hand="$(prog pipeline)" || { echo "FAIL: gpt plan pipeline did not lower"; exit 1; }
auto="$(prog pipeline_by_structure)" || { echo "FAIL: gpt plan pipeline_by_structure did not lower"; exit 1; }
if [ -z "$hand" ] || [ "$hand" != "$auto" ]; then
  echo "FAIL: gpt pipeline_by_structure lowers unlike the hand-written pipeline:"; diff <(echo "$hand") <(echo "$auto") | head -20; fail=1
fi
# A plan that uses 2 of 4 devices is a warning naming the idle ones; none at 2.
idle="$("$NNS" check tests/plan/plans/structure.nns --config small --plan two_stages --gpus 4 2>&1 >/dev/null)"
if ! grep -q "warning: plan two_stages on 4 devices leaves devices 2, 3 idle" <<<"$idle"; then echo "FAIL: no idle-device warning: $idle"; fail=1; fi
two="$("$NNS" check tests/plan/plans/structure.nns --config small --plan two_stages --gpus 2 2>&1)"
if grep -q "idle" <<<"$two"; then
  echo "FAIL: an idle-device warning on 2 devices"; fail=1
fi
[ $fail = 0 ] && echo "structure_select: selections as expected; gpt's structural 1F1B stages = its hand-written ones"
exit $fail

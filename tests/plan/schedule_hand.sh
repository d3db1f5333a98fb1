#!/usr/bin/env bash
# A pipeline schedule written by hand with fwd()/bwd() tasks and order()
# lowers to the same per-rank programs as the schedule library's: plan hand
# of tests/plan/plans/pipeline.nns (2-stage 1F1B in loops) against plan
# onef1b (schedule("1f1b", ...)), equal but for the plan's name; and both
# differ from gpipe (so an order that is ignored would be noticed).
#   schedule_hand.sh NNS_BINARY
set -uo pipefail
NNS="$1"
cd "$(dirname "$0")/../.."
prog() {  # PLAN
  "$NNS" check tests/plan/plans/pipeline.nns --config small --plan "$1" --gpus 2 --emit=program | sed "s/ of plan $1,/ of plan P,/"
}
one="$(prog onef1b)" || { echo "FAIL: plan onef1b did not lower"; exit 1; }
hand="$(prog hand)" || { echo "FAIL: plan hand did not lower"; exit 1; }
gpipe="$(prog gpipe)" || { echo "FAIL: plan gpipe did not lower"; exit 1; }
fail=0
if [ -z "$one" ] || ! grep -q '^program rank 1 ' <<<"$one"; then echo "FAIL: no programs printed"; fail=1; fi
if [ "$one" != "$hand" ]; then
  echo "FAIL: plan hand's programs differ from plan onef1b's:"; diff <(echo "$one") <(echo "$hand") | head -20; fail=1
fi
if [ "$one" = "$gpipe" ]; then echo "FAIL: plan gpipe lowers like onef1b: the schedule is ignored"; fail=1; fi
[ $fail = 0 ] && echo "schedule_hand: hand-written 1F1B = schedule(\"1f1b\") on 2 ranks"
exit $fail

#!/usr/bin/env bash
# assign(parts, devices, order = "auto") (tests/plan/plans/auto_order.nns):
# the loss's parts, reading linear#1's V(2) D0(n/2) output, are placed in
# nnScaler's order, where that edge is a single reduce-scatter; the given
# order needs more collectives. --emit=plan shows the chosen order, and the
# 4-rank run verifies against one device (8 ranks are checked only).
#   auto_order.sh NNS_BINARY
set -uo pipefail
NNS="$1"
cd "$(dirname "$0")/../.."
FILE=tests/plan/plans/auto_order.nns
fail=0

# The adapter steps of the forward edge linear#1 -> mse#0, one per line.
edge_steps() {  # PLAN GPUS
  "$NNS" check "$FILE" --plan "$1" --gpus "$2" --emit=comm |
    awk '/^  forward .*linear#1 -> mse#0/ { on = 1; next } /^  [a-z]/ { on = 0 } on && /^    [a-z]/ && !/ over / { print $1 }'
}

expect_eq() {  # WHAT ACTUAL EXPECTED
  if [ "$2" != "$3" ]; then
    echo "FAIL: $1: got '$2', expected '$3'"
    fail=1
  fi
}

for gpus in 4 8; do
  auto=$(edge_steps auto $gpus)
  given=$(edge_steps given $gpus)
  expect_eq "auto on $gpus devices: steps of linear#1 -> mse#0" "$auto" "reduce-scatter"
  if [ "$(wc -l <<<"$given")" -le 1 ]; then
    echo "FAIL: given order on $gpus devices: expected more than one step, got '$given'"
    fail=1
  fi
done

order_line() {  # GPUS
  "$NNS" check "$FILE" --plan auto --gpus "$1" --emit=plan | grep -o 'order auto: parts of mse#0 on devices [0-9,]*'
}
expect_eq "chosen order on 4 devices" "$(order_line 4)" "order auto: parts of mse#0 on devices 0,2,1,3"
expect_eq "chosen order on 8 devices" "$(order_line 8)" "order auto: parts of mse#0 on devices 0,4,1,5,2,6,3,7"

if ! out=$("$NNS" run "$FILE" --plan auto --gpus 4 --verify --steps 2 2>&1) || ! grep -q 'verify: largest relative error .*: PASS' <<<"$out"; then
  echo "FAIL: run --plan auto --gpus 4 --verify:"
  tail -5 <<<"$out"
  fail=1
fi

[ $fail = 0 ] && echo PASS
exit $fail

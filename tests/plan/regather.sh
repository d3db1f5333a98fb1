#!/usr/bin/env bash
# regather(ops) (tests/plan/plans/regather.nns): under sequence parallelism
# the column-parallel linear drops the gathered sequence after its forward
# and its backward gathers the token slice again. Every plan --verifies
# against one device (2 ranks, with recompute, 1F1B and ZB-H1 pipelines on
# 4: under ZB-H1 the weight gradients run later and still read it); each
# regathered input adds one all-gather per micro-batch in the backward, of
# the same shard the forward gathered; the capacity check's activations
# and the run's peak are below the plan without it; the checker's peak is
# the run's to the byte; a regather() that names no gathered input changes
# nothing and gets a warning.
#   regather.sh NNS_BINARY
set -uo pipefail
source "$(dirname "$0")/plan_checks.sh"  # NNS from $1, the source root, fail=0
FILE=tests/plan/plans/regather.nns

verify_runs "sp 2" "sp_regather 2" "ln_regather 2" "sp_regather_recompute 2" "sp_regather_pipeline 4" "sp_regather_zb 4"

with=$(rank0 sp_regather) without=$(rank0 sp)
# 2 blocks x 2 micro-batches: one more all-gather each, of the layer norm's
# output into the first linear, from the buffer the forward gathered.
gathers() { grep ' allgather ' <<<"$1" | grep -v 'gradient of' | grep -c 'layer_norm#0 -> blocks\.[01]\.linear#0'; }
expect_eq "gathers of the layer norms' outputs with regather" "$(gathers "$with")" "$(( $(gathers "$without") * 2 ))"
expect_eq "gathers of the layer norms' outputs without" "$(gathers "$without")" "4"
for mb in 0 1; do
  srcs=$(grep " mb$mb allgather " <<<"$with" | grep 'blocks\.0\.layer_norm#0 -> blocks\.0\.linear#0' | awk '{print $3}' | sort -u | wc -l)
  expect_eq "sources of block 0's two gathers in micro-batch $mb" "$srcs" "1"
done
expect_eq "kernels that regather" "$(grep -c 'regather-in0' <<<"$with")" "2"
# Nothing comes into a layer norm through a gather: the same program.
# (The header names the plan.)
expect_eq "ln_regather's program" "$(rank0 ln_regather | sed 1d | md5sum)" "$(sed 1d <<<"$without" | md5sum)"

# ... and the check says so where it was called, as a warning (exit 0).
warn=$("$NNS" check "$FILE" --plan ln_regather --gpus 2 2>&1 >/dev/null)
expect_eq "ln_regather's warning" "$(grep -c '^tests/plan/plans/regather.nns:[0-9]*:3: warning: regather(): no input of these ops' <<<"$warn")" "1"
expect_eq "ln_regather's caret" "$(grep -c '^ *\^~~' <<<"$warn")" "1"
expect_eq "sp_regather's warnings" "$("$NNS" check "$FILE" --plan sp_regather --gpus 2 2>&1 >/dev/null | grep -c warning)" "0"

act() { "$NNS" check "$FILE" --plan "$1" --gpus 2 | grep -o 'activations [0-9.]* [KMG]*i*B'; }
# Rank 0's activations at its peak: the gathered sequence (4 x 8 x 16
# floats, 2 KiB) against its token slice (1 KiB), for each of the two blocks.
expect_eq "checker activations with regather" "$(act sp_regather)" "activations 33.25 KiB"
expect_eq "checker activations without" "$(act sp)" "activations 35.25 KiB"
check_bytes() { "$NNS" check "$FILE" --plan "$1" --gpus "$2" | sed -n 's/.*memory: peak [^(]*(\([0-9]*\) bytes).*/\1/p'; }
run_bytes() { "$NNS" run "$FILE" --plan "$1" --gpus "$2" --steps 2 --peak-by-rank 2>&1 | sed -n 's/^memory peak by rank (bytes)://p' | tr ' ' '\n' | sort -n | tail -1; }
for run in "sp 2" "sp_regather 2" "sp_regather_pipeline 4" "sp_regather_zb 4"; do
  set -- $run
  expect_eq "checker peak = run peak, $1 on $2" "$(check_bytes "$1" "$2")" "$(run_bytes "$1" "$2")"
done
p_with=$(run_bytes sp_regather 2) p_without=$(run_bytes sp 2)
if ! awk -v a="$p_with" -v b="$p_without" 'BEGIN { exit !(a > 0 && a < b) }'; then
  echo "FAIL: the run's peak with regather, $p_with bytes, is not below $p_without"
  fail=1
fi

[ $fail = 0 ] && echo PASS
exit $fail

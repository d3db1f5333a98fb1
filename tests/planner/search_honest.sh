#!/usr/bin/env bash
# nns plan tells the truth (issue 26, item 4):
#  - BERT tiny on 8 devices: no plan beats one device, and the output says
#    so; the best (a TP group that splits no op) is named as replication;
#    data parallelism is skipped with its reason (batch 4 over 8 devices);
#    Megatron-style is compared only at a TP degree its heads split over;
#    no "best vs" speedup line is printed.
#  - Models without Megatron's structure (ResNet, the U-Net) skip the
#    Megatron-style baseline and say why.
#  - A U-Net with no layered names (one search unit) is searched; progress
#    lines appear on stderr when NNS_SETUP_NOTICE asks (piped: whole lines)
#    and not otherwise.
# No timing is asserted.
#   bash tests/planner/search_honest.sh build/nns
set -u
NNS=${1:-build/nns}
fail=0
say_fail() { echo "FAIL: $1"; shift; printf '%s\n' "$@"; fail=1; }

# has TEXT REGEX: grep -E on captured text (no pipe into grep -q).
has() { grep -Eq -- "$2" <<< "$1"; }

out=$(env -u NNS_SETUP_NOTICE "$NNS" plan examples/bert.nns --config tiny --gpus 8 --device a100 --no-check 2>&1)
rc=$?
[ $rc -eq 0 ] || say_fail "bert tiny on 8 exited $rc" "$out"
# (below 1x: the replicas pay the step's loss allreduce over the 8 ranks)
has "$out" '^no plan beats one device on 8 x a100: the best reaches (0\.[0-9]+|1\.000)x one device' || say_fail "bert: no 'no plan beats one device'" "$out"
has "$out" '^  best +pp 1 x tp [0-9]+ x dp [0-9]+, .*no op split \(replicated\)' || say_fail "bert: the best is not named as replication" "$out"
has "$out" 'replication, not parallelism' || say_fail "bert: replication not said plainly" "$out"
has "$out" '^  data par\. +skipped: the global batch \(4\) does not split over 8 devices' || say_fail "bert: data parallelism not skipped with its reason" "$out"
# BERT has 4 heads: Megatron-style applies at tp 2 or 4, never tp 8.
has "$out" '^  megatron +pp [0-9]+ x tp [24] x ' || say_fail "bert: no Megatron-style row at tp 2 or 4" "$out"
if has "$out" '^best vs|x throughput'; then say_fail "bert: a speedup is claimed" "$out"; fi
if has "$out" '^nns: searching plans'; then say_fail "bert: progress printed without NNS_SETUP_NOTICE on a pipe" "$out"; fi
[ $fail -eq 0 ] && echo "ok: bert tiny: replication reported, inapplicable baselines skipped, no speedup claimed"

out=$("$NNS" plan examples/resnet.nns --config tiny --gpus 4 --device a100 --no-check 2>&1)
has "$out" '^  megatron +skipped: the model has no Megatron structure \(no attention op' || say_fail "resnet: Megatron-style not skipped" "$out"
if has "$out" 'vs Megatron-style'; then say_fail "resnet: compared with Megatron-style" "$out"; fi
[ $fail -eq 0 ] && echo "ok: resnet: Megatron-style skipped"

out=$("$NNS" plan examples/unet.nns --config tiny --gpus 4 --device a100 --no-check 2>&1)
has "$out" '^  megatron +skipped: the model has no Megatron structure \(no attention op followed by an MLP' || say_fail "unet: Megatron-style not skipped" "$out"
has "$out" '^  data par\. +pp 1 x tp 1 x dp 4' || say_fail "unet: no data-parallel baseline" "$out"
has "$out" '^best vs one device: [0-9.]+x throughput; vs data parallel: [0-9.]+x throughput$' || say_fail "unet: no comparison with its baselines" "$out"
[ $fail -eq 0 ] && echo "ok: unet: compared with one device and data parallelism only"

# The flat U-Net (one unit), with progress forced at once: plain lines on a pipe.
err=$(NNS_SETUP_NOTICE=0 "$NNS" plan tests/planner/unet_flat.nns --gpus 4 --device a100 --no-check 2>&1 >/dev/null)
out=$("$NNS" plan tests/planner/unet_flat.nns --gpus 4 --device a100 --no-check 2>&1)
has "$out" ': [0-9]+ ops in 1 units \(1 distinct\)' || say_fail "unet_flat: not one unit" "$out"
has "$out" '^  best ' || say_fail "unet_flat: no plan" "$out"
has "$err" '^nns: searching plans for 4 x a100: grid points [0-9]+ of 3 done, [0-9]+ candidates, [0-9]+ unit solves, best ([0-9.e+-]+ ms/step \(pp [0-9]+ x tp|none yet)' ||
  say_fail "unet_flat: no progress line" "$err"
has "$err" '^nns: searching plans for 4 x a100: done in [0-9.]+ s$' || say_fail "unet_flat: no end of progress" "$err"
if has "$err" $'\r'; then say_fail "unet_flat: a redrawn line on a pipe" "$err"; fi
[ $fail -eq 0 ] && echo "ok: unet_flat: searched as one unit, progress lines on stderr"

# A malformed threshold is a usage error naming the variable, as for check.
out=$(NNS_SETUP_NOTICE=soon "$NNS" plan examples/bert.nns --config tiny --gpus 2 --device a100 --no-check 2>&1)
rc=$?
{ [ $rc -eq 64 ] && has "$out" 'NNS_SETUP_NOTICE'; } || say_fail "NNS_SETUP_NOTICE=soon: exit $rc" "$out"

[ $fail -eq 0 ] && echo "PASS: search honest"
exit $fail

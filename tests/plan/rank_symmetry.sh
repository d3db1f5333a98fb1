#!/usr/bin/env bash
# Rank symmetry (backend/lowering/rank_symmetry.h) as the driver uses it:
# with it, `nns check` moves most ranks' programs (its report says how
# many) and its report (less the times and that note) and `--emit=program`
# are the same byte for byte as with NNS_RANK_SYMMETRY=0 (every device
# lowered); a run, whose rank processes move their programs too, trains to
# the same losses. Every field of the moved programs is compared by
# tests/plan/lower_plan_test.cpp ([symmetry]); this checks the wiring.
#   rank_symmetry.sh NNS_BINARY
set -uo pipefail
NNS="$1"
cd "$(dirname "$0")/../.."
fail=0

source tests/plan/same_output.sh
# Times masked, runs of spaces collapsed, the note on how many programs
# were moved dropped, and how many buffers the buffer check interpreted (a
# moved device is a skeleton whose buffers are its representative's moved:
# buffer_check.h).
masked() {
  sed -E 's/[0-9]+(\.[0-9]+)? (ms|s|tokens\/s)\b/T \2/g; s/ \([0-9]+ lowered, [0-9]+ moved .*$//; s/ +/ /g
    s/[0-9]+ buffer\(s\) of [0-9]+ whole program\(s\)/B buffer(s) of P whole program(s)/'
}
# Output and exit code with every device lowered and with moves.
same() { same_under NNS_RANK_SYMMETRY=0 "$@"; }

for a in "examples/alphafold2.nns tiny dap 4 3" "examples/swin.nns tiny coshard 2 1" "examples/gpt.nns tiny hybrid 4 2" \
  "examples/moe.nns tiny ep 4 3"; do
  set -- $a
  same "$1 $3 check" check "$1" --config "$2" --plan "$3" --gpus "$4"
  if [[ "$raw" != *"lowered, $5 moved along"*" as skeletons"* ]]; then
    echo "FAIL: $1 $3 on $4: the check does not say it moved $5 program(s):"
    grep "times:" <<<"$raw"
    fail=1
  fi
  same "$1 $3 --emit=program" check "$1" --config "$2" --plan "$3" --gpus "$4" --emit=program
done
# A pipeline's stages are not one program moved: nothing is moved.
same "gpt pipeline check" check examples/gpt.nns --config tiny_pipe --plan pipeline --gpus 2
if [[ "$raw" == *" moved along"* ]]; then
  echo "FAIL: a pipeline plan's stages were moved"
  fail=1
fi
# Each rank process moves its program from rank 0's: the same losses.
same "alphafold2 dap run" run examples/alphafold2.nns --config tiny --plan dap --gpus 2 --steps 2
same "gpt megatron run" run examples/gpt.nns --config tiny --plan megatron --gpus 2 --steps 2

[ "$fail" = 0 ] && echo "PASS: moved programs give the same report, programs and losses as lowering every device"
exit "$fail"

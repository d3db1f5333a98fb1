#!/usr/bin/env bash
# Program verification: every shipped plan's lowered programs verify, and
# each seeded bug (nns check --seed-bug, a test hook) is caught with its
# exact diagnosis and exit 70.
#   program_verify.sh NNS_BINARY
set -uo pipefail
NNS="$1"
cd "$(dirname "$0")/../.."
fail=0

ok() {  # FILE CONFIG PLAN GPUS [PLAN_GPUS]
  local extra=()
  [ -n "${5:-}" ] && extra=(--plan-gpus "$5")
  out="$("$NNS" check "$1" --config "$2" --plan "$3" --gpus "$4" "${extra[@]}" 2>&1)"
  if ! grep -q "collective(s) matched across ranks: verified" <<<"$out"; then
    echo "FAIL: $1 $3 on $4 did not verify:"; echo "$out" | tail -5; fail=1
  fi
}
bug() {  # KIND EXPECTED-SUBSTRING FILE CONFIG PLAN GPUS [PLAN_GPUS]
  local extra=()
  [ -n "${7:-}" ] && extra=(--plan-gpus "$7")
  out="$("$NNS" check "$3" --config "$4" --plan "$5" --gpus "$6" "${extra[@]}" --seed-bug "$1" 2>&1)"
  rc=$?
  if [ $rc -ne 70 ] || ! grep -qF -- "$2" <<<"$out"; then
    echo "FAIL: seeded $1: exit $rc, expected 70 and: $2"; echo "$out" | tail -4; fail=1
  fi
}

for p in dp megatron hybrid; do ok examples/gpt.nns tiny $p 4; done
ok examples/gpt.nns tiny megatron 4 2
for p in dp megatron coshard; do ok examples/swin.nns tiny $p 2; done
for p in dp megatron hybrid; do ok examples/llama.nns tiny $p 4; done
ok examples/resnet.nns tiny dp 4
for p in dp ep ep_recompute; do ok examples/moe.nns tiny $p 4; done
for p in dp megatron pipeline; do ok examples/01_mlp.nns small $p 2; done
for p in alltoall reducescatter allgather stages nested; do ok tests/plan/plans/collectives.nns small $p 4; done

G="examples/gpt.nns tiny megatron 2"
bug missing-allreduce "program: %60 (blocks.0.attn.attention#0 -> blocks.0.attn.add#0): device 0 reads [0:4, 0:32, 0:64] without partial sum 1 of 2 (a missing allreduce?)" $G
bug allgather-for-allreduce "step 1 (allgather): group {0,1} gathers pieces holding different partial sums (an allreduce is needed first)" $G
bug wrong-group "step 1 (allreduce): group {0} sums 1 of the 2 partial sums it must combine (a wrong device group: devices {1} hold the others)" $G
bug double-count "step 2 (allreduce): group {0,1} counts partial sum 0 2 times" $G
bug collective-order "deadlock: the ranks wait on different collectives: rank 0 on the allreduce of %67 (blocks.0.mlp.fc2.linear#0 -> blocks.0.mlp.fc2.add#0) over {0,1}; rank 1 on the allreduce of %60" $G
bug early-update "rank 0: the update of wte is issued before its gradient is reduced (bucketed gradient allreduce over {0,1})" examples/gpt.nns tiny dp 2
bug replica-scale "rank 2: the gradient of ln_f.weight is scaled by 1.000000 but by 1/2 on the other replicas" examples/gpt.nns tiny megatron 4 2
bug gradient-scale-1pct "rank 2: the gradient of ln_f.weight is scaled by 0.505000 but by 1/2 on the other replicas" examples/gpt.nns tiny megatron 4 2
bug gradient-copies "the gradient of wte is counted 1.5 times over the ranks" examples/gpt.nns tiny dp 2
bug wrong-stage-device "program: %4 (linear#0 -> gelu#0), step 1 (send/recv): device 2 of the next stage receives nothing" tests/plan/plans/collectives.nns small stages 4
# On 2 devices there is no third device: the send goes to the sender itself.
bug wrong-stage-device "program: %5 (gelu#0 -> linear#1), step 1 (send/recv): device 1 of the next stage receives nothing" examples/01_mlp.nns small pipeline 2
# A pipeline's point-to-point order: rank 0 waits for a gradient before the
# activation send that gradient answers.
bug collective-order "deadlock: the ranks wait on different collectives: rank 0 waits for the send/recv of gradient of" examples/alphafold2.nns tiny pipeline3f1b 4
# Issue 25: a partial sum read by two ops allreduced twice in place on the
# producer's buffer. Only the buffer check sees it: every diagnosis is one
# of its (rank, instruction) lines, none of the value or order halves.
bug double-inplace-allreduce "already reduced it in place: the partial sum is reduced twice (its reduction count is 2)" tests/plan/plans/shared_partial.nns small vs 2
errs=$(grep "^nns: error: program: " <<<"$out")
other=$(grep -v "^nns: error: program: rank [0-9]*, instruction [0-9]* (" <<<"$errs")
if [ -z "$errs" ] || [ -n "$other" ]; then
  echo "FAIL: double-inplace-allreduce: expected only buffer-check diagnoses, got:"; echo "$errs" | head -5; fail=1
fi
ok tests/plan/plans/shared_partial.nns small vs 2
# Issue 25: a kernel reading a buffer after its free. The lowering nns
# check verifies carries the kernels' instructions, so the buffer check
# sees the read; its diagnosis is the only one.
bug kernel-read-after-free "(mb0 slice-in k0.in0 <- b36): reads b36 (input of ids, mb0) after its free at instruction 1" $G
errs=$(grep "^nns: error: program: " <<<"$out")
other=$(grep -v "^nns: error: program: rank [0-9]*, instruction [0-9]* (" <<<"$errs")
if [ -z "$errs" ] || [ -n "$other" ]; then
  echo "FAIL: kernel-read-after-free: expected only buffer-check diagnoses, got:"; echo "$errs" | head -5; fail=1
fi
bug kernel-read-after-free "reads b" examples/alphafold2.nns tiny pipeline3f1b 4
# Early send releases: rank 0 frees a sent activation at its wait for a
# gradient that rank 1 sends before it has received that activation.
bug early-send-release "program: rank 0 releases its send of tag 4 to rank 1 (b96, %69, mb1) at its wait for tag 3, but rank 1 sends tag 3 (instruction 296) before it waits for tag 4 (instruction 309): the send may still be in flight when its buffer is freed" examples/gpt.nns tiny_pipe pipeline 2
ok examples/gpt.nns tiny_pipe pipeline 2
ok examples/gpt.nns tiny_pipe zero_bubble 2
# A kind with nothing to corrupt says so, with its own exit status.
out="$("$NNS" check examples/01_mlp.nns --config small --plan dp --gpus 2 --seed-bug wrong-stage-device 2>&1)"
rc=$?
if [ $rc -ne 69 ] || ! grep -qF "nns: seeded bug does not apply: the plan has no send/recv to corrupt (--seed-bug wrong-stage-device; exit 69)" <<<"$out"; then
  echo "FAIL: wrong-stage-device on dp: exit $rc, expected 69 and 'does not apply'"; echo "$out" | tail -3; fail=1
fi

[ $fail -eq 0 ] && echo PASS
exit $fail

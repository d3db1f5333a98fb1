#!/usr/bin/env bash
# gpt and llama with their attention core as one sdpa op (fused_attention =
# true; stdlib attention / gqa_attention fused = true) against the unfused ops: the same losses and
# gradient norms, bit for bit, on one device (the sdpa kernels run the
# unfused kernels in their order, cpu/ops_attention.cpp); the megatron plan
# on 2 ranks passes --verify; less activation memory, the same MACs.
#   fused_attention.sh NNS_BINARY
set -uo pipefail
NNS="$1"
cd "$(dirname "$0")/../.."
fail=0
steps() { grep -E '^step' <<<"$1" | sed -E 's/ +[0-9.]+ ms.*//'; }  # loss, lr and |g| of each step, without timings

plain=$("$NNS" run examples/gpt.nns --config tiny --steps 3 --set fused_attention=false 2>&1) || { echo "FAIL: unfused run: $plain"; exit 1; }
fused=$("$NNS" run examples/gpt.nns --config tiny --steps 3 --set fused_attention=true 2>&1) || { echo "FAIL: fused run: $fused"; exit 1; }
if [ "$(steps "$plain")" != "$(steps "$fused")" ] || [ -z "$(steps "$plain")" ]; then
  echo "FAIL: fused and unfused steps differ:"; diff <(steps "$plain") <(steps "$fused"); fail=1
fi

# llama: grouped-query attention, sdpa over each group's stacked queries (period = seq).
lplain=$("$NNS" run examples/llama.nns --config tiny --steps 3 --set fused_attention=false 2>&1) || { echo "FAIL: llama unfused: $lplain"; exit 1; }
lfused=$("$NNS" run examples/llama.nns --config tiny --steps 3 --set fused_attention=true 2>&1) || { echo "FAIL: llama fused: $lfused"; exit 1; }
if [ "$(steps "$lplain")" != "$(steps "$lfused")" ] || [ -z "$(steps "$lplain")" ]; then
  echo "FAIL: llama fused and unfused steps differ:"; diff <(steps "$lplain") <(steps "$lfused"); fail=1
fi
lout=$("$NNS" run examples/llama.nns --config tiny --steps 3 --set fused_attention=true --plan megatron --gpus 2 --verify 2>&1)
if [ $? != 0 ] || ! grep -q ": PASS (fp32 bound" <<<"$lout"; then echo "FAIL: llama megatron with sdpa --verify:"; tail -5 <<<"$lout"; fail=1; fi

out=$("$NNS" run examples/gpt.nns --config tiny --steps 3 --set fused_attention=true --plan megatron --gpus 2 --verify 2>&1)
rc=$?
if [ $rc != 0 ] || ! grep -q ": PASS (fp32 bound" <<<"$out"; then echo "FAIL: megatron with sdpa --verify (exit $rc):"; tail -5 <<<"$out"; fail=1; fi

# gpu_stack (GPT-3 1.3B dims, seq 2048): the [seq, seq] tensors are no longer kept.
act() { sed -n 's/^ *activations: *\([0-9.]*\) GiB.*/\1/p' <<<"$1"; }
macs() { sed -n 's/^ *forward: *\([0-9.]*\) GMACs.*/\1/p' <<<"$1"; }
c_plain=$("$NNS" check examples/gpt.nns --config gpu_stack --set fused_attention=false 2>&1)
c_fused=$("$NNS" check examples/gpt.nns --config gpu_stack --set fused_attention=true 2>&1)
a_plain=$(act "$c_plain") a_fused=$(act "$c_fused")
if [ -z "$a_plain" ] || [ -z "$a_fused" ] || ! awk -v p="$a_plain" -v f="$a_fused" 'BEGIN { exit !(f < 0.6 * p) }'; then
  echo "FAIL: activations unfused $a_plain GiB, fused $a_fused GiB (expected well below)"; fail=1
fi
if [ "$(macs "$c_plain")" != "$(macs "$c_fused")" ] || [ -z "$(macs "$c_plain")" ]; then
  echo "FAIL: forward MACs differ: $(macs "$c_plain") vs $(macs "$c_fused")"; fail=1
fi
[ $fail = 0 ] && echo "PASS: fused attention (gpt, llama) equals the unfused ops bit for bit; megatron --verify passes; activations $a_plain -> $a_fused GiB at the same MACs"
exit $fail

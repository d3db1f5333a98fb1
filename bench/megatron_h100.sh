#!/usr/bin/env bash
# Predicted vs published Megatron-LM throughput on H100 (Megatron-LM's
# README throughput table: H100 80GB SXM, bf16, sequence 4096, vocabulary
# 131072, untied output layer). For each row, `nns simulate` replays plan
# megatron_h100 of examples/gpt.nns (config h100_*) on the h100 profile at
# bf16. TFLOP/s per GPU on both sides are FLOPs per iteration as
# Megatron-LM's training code counts them (num_floating_point_operations,
# no GQA, no MoE, no SwiGLU, ffn = 4h):
#   12 B s L h^2 (2 + s/h + 4 + V/(2 L h))
# over the step time and the GPU count (the published figures were computed
# with this formula). Prints predicted, published, the error and the
# simulation's wall time, with the gradient allreduce blocking and
# overlapped with the backward (--overlap-grad-reduce), and with the
# mechanisms the table's runs used (column "megatron": plan
# megatron_h100_sp, the same placement with Megatron-LM's sequence
# parallelism, and Megatron-LM's distributed optimizer with overlapped
# gradient reduce-scatter and parameter all-gather and its tensor-parallel
# communication overlap: --distributed-optimizer --overlap-grad-reduce
# --overlap-param-gather --tp-comm-overlap; docs/simulator.md), each with
# its simulated peak.
# --check exits 1 when a "megatron" prediction misses by more than 15% or
# its peak is not under 80 GB (74.5 GiB).
#   bench/megatron_h100.sh [--check] [--rows h100_1_7b,h100_16b]     NNS=path selects the binary
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NNS="${NNS:-$ROOT/build/nns}"
CHECK=0
ROWS_WANTED=""
while [ $# -gt 0 ]; do
  case "$1" in
    --check) CHECK=1; shift ;;
    --rows) ROWS_WANTED=",$2,"; shift 2 ;;
    *) echo "megatron_h100.sh: unknown argument '$1'" >&2; exit 64 ;;
  esac
done
cd "$ROOT"

# config hidden layers tp pp gpus global_batch published_tflops
ROWS=(
  "h100_1_7b 2048 24 1 1 48 192 408.8"
  "h100_7_1b 4096 30 2 1 96 192 465.9"
  "h100_16b 6144 32 4 1 192 192 489.1"
  "h100_32b 7168 48 8 1 384 192 459.6"
  "h100_70b 8192 84 8 2 768 384 419.7"
  "h100_119b 10240 92 8 4 1536 768 420.5"
  "h100_177b 12288 96 8 6 2304 1152 432.8"
  "h100_314b 16384 96 8 8 3072 1536 474.4"
  "h100_462b 18432 112 8 16 6144 3072 459.9"
)
SEQ=4096
VOCAB=131072

# simulate CONFIG GPUS PLAN_GPUS [FLAGS...] -> "step_ms wall_s peak_GiB"
source "$ROOT/bench/simulate_step.sh"
simulate() { simulate_step "$NNS" megatron_h100 h100 bf16 "$@"; }
simulate_sp() { simulate_step "$NNS" megatron_h100_sp h100 bf16 "$@"; }

MEGATRON=(--distributed-optimizer --overlap-grad-reduce --overlap-param-gather --tp-comm-overlap)
MISSES=0
printf "%-10s %5s %4s %3s %3s %5s  %9s %9s %7s   %9s %7s %7s %8s   %9s %7s %8s\n" config hidden L tp pp gpus published blocking error \
  overlapped error sim_s peak_GiB megatron error peak_GiB
for row in "${ROWS[@]}"; do
  read -r cfg h l tp pp gpus gb pub <<<"$row"
  if [ -n "$ROWS_WANTED" ] && [[ "$ROWS_WANTED" != *",$cfg,"* ]]; then continue; fi
  plan_gpus=$((tp * pp))
  read -r step wall peak _ <<<"$(simulate "$cfg" "$gpus" "$plan_gpus")"
  read -r step_o wall_o peak_o _ <<<"$(simulate "$cfg" "$gpus" "$plan_gpus" --overlap-grad-reduce)"
  read -r step_m wall_m peak_m _ <<<"$(simulate_sp "$cfg" "$gpus" "$plan_gpus" "${MEGATRON[@]}")"
  line=$(awk -v cfg="$cfg" -v h="$h" -v l="$l" -v tp="$tp" -v pp="$pp" -v g="$gpus" -v B="$gb" -v s="$SEQ" -v V="$VOCAB" \
      -v pub="$pub" -v step="$step" -v wall="$wall" -v step_o="$step_o" -v peak="$peak" -v step_m="$step_m" -v peak_m="$peak_m" 'BEGIN {
    flops = 12 * B * s * l * h * h * (2 + s / h + 4 + V / (2 * l * h))
    pred = flops / (step / 1000) / g / 1e12
    pred_o = flops / (step_o / 1000) / g / 1e12
    pred_m = flops / (step_m / 1000) / g / 1e12
    printf "%-10s %5d %4d %3d %3d %5d  %9.1f %9.1f %+6.1f%%   %9.1f %+6.1f%% %7.2f %8s   %9.1f %+6.1f%% %8s\n", cfg, h, l, tp, pp, g, pub, pred,
           100 * (pred - pub) / pub, pred_o, 100 * (pred_o - pub) / pub, wall, peak, pred_m, 100 * (pred_m - pub) / pub, peak_m
    # 80 GB = 74.5 GiB
    if (pred_m < 0.85 * pub || pred_m > 1.15 * pub || !(peak_m + 0 < 74.5)) print "MISS"
  }')
  echo "${line%$'\n'MISS}"
  case "$line" in *MISS) MISSES=$((MISSES + 1)) ;; esac
done
echo "(TFLOP/s per GPU; sim_s: wall seconds of the blocking simulation; peak_GiB: the simulated peak per GPU, blocking and megatron)"
if [ "$CHECK" = 1 ]; then
  if [ "$MISSES" -gt 0 ]; then echo "check: $MISSES row(s) outside +-15% or over 80 GB"; exit 1; fi
  echo "check: every row within +-15% and under 80 GB"
fi

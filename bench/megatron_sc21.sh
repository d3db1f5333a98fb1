#!/usr/bin/env bash
# Predicted vs published Megatron-LM throughput (Narayanan et al., SC'21,
# "Efficient Large-Scale Language Model Training on GPU Clusters Using
# Megatron-LM", Table 1: A100-80GB, 8 per node with NVSwitch, InfiniBand
# between nodes, sequence 2048, vocabulary 51200, fp16, full recompute).
# For each row, `nns simulate` replays plan megatron_sc21 of
# examples/gpt.nns (config sc21_*) on the a100 profile at fp16; the
# TFLOP/s per GPU are the paper's FLOPs per iteration,
#   96 B s l h^2 (1 + s/(6h) + V/(16 l h)),
# over the simulated step time and the GPU count. Prints predicted,
# published, relative error and the simulation's wall time, with the
# gradient allreduce blocking (what nns's runtime does and Megatron's local
# DDP of 2021 did) and overlapped with the backward (--overlap-grad-reduce).
# --check exits 1 when a blocking prediction misses its published figure
# by more than 15% (issue 12's bound; ctest bench_megatron_sc21); it skips
# the overlapped runs (that column then repeats the blocking one).
# --rows A,B limits the run to those configs (ctest bench_megatron_sc21
# runs the two smaller rows; the rows from 145.6B up take 5-30 s each on a
# 2-core machine, one rank per class of equal programs replayed: issue 31
# item 4, the README has the figures).
#   bench/megatron_sc21.sh [--device PROFILE] [--check] [--rows sc21_1_7b,sc21_18b]     NNS=path selects the binary
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NNS="${NNS:-$ROOT/build/nns}"
DEVICE=a100
CHECK=0
ROWS_WANTED=""
while [ $# -gt 0 ]; do
  case "$1" in
    --device) DEVICE="$2"; shift 2 ;;
    --check) CHECK=1; shift ;;
    --rows) ROWS_WANTED=",$2,"; shift 2 ;;
    *) echo "megatron_sc21.sh: unknown argument '$1'" >&2; exit 64 ;;
  esac
done
cd "$ROOT"

# config hidden layers heads tp pp gpus global_batch micro_batch published_tflops
# (all ten rows of Table 1; micro-batch sizes and schedules in examples/gpt.nns)
ROWS=(
  "sc21_1_7b 2304 24 24 1 1 32 512 16 137"
  "sc21_3_6b 3072 30 32 2 1 64 512 16 138"
  "sc21_7_5b 4096 36 32 4 1 128 512 8 142"
  "sc21_18b 6144 40 48 8 1 256 1024 8 135"
  "sc21_39b 8192 48 64 8 2 512 1536 2 138"
  "sc21_76b 10240 60 80 8 4 1024 1792 2 140"
  "sc21_145b 12288 80 96 8 8 1536 2304 2 148"
  "sc21_310b 16384 96 128 8 16 1920 2160 1 155"
  "sc21_530b 20480 105 128 8 35 2520 2520 1 163"
  "sc21_1t 25600 128 160 8 64 3072 3072 1 163"
)
SEQ=2048
VOCAB=51200

# simulate CONFIG GPUS PLAN_GPUS [FLAGS...] -> "step_ms wall_s peak_GiB"
source "$ROOT/bench/simulate_step.sh"
simulate() { simulate_step "$NNS" megatron_sc21 "$DEVICE" fp16 "$@"; }

MISSES=0
printf "%-10s %5s %4s %3s %3s %5s  %9s %9s %7s %8s %7s %6s   %9s %7s\n" config hidden L tp pp gpus published predicted error peak_GiB sim_s rss_GB overlapped error
for row in "${ROWS[@]}"; do
  read -r cfg h l heads tp pp gpus gb mb pub <<<"$row"
  if [ -n "$ROWS_WANTED" ] && [[ "$ROWS_WANTED" != *",$cfg,"* ]]; then continue; fi
  plan_gpus=$((tp * pp))
  read -r step wall peak rss <<<"$(simulate "$cfg" "$gpus" "$plan_gpus")"
  # --check (ctest) costs the blocking runs only.
  step_o=$step
  [ "$CHECK" = 1 ] || read -r step_o _ <<<"$(simulate "$cfg" "$gpus" "$plan_gpus" --overlap-grad-reduce)"
  line=$(awk -v cfg="$cfg" -v h="$h" -v l="$l" -v tp="$tp" -v pp="$pp" -v g="$gpus" -v B="$gb" -v s="$SEQ" -v V="$VOCAB" \
      -v pub="$pub" -v step="$step" -v wall="$wall" -v step_o="$step_o" -v peak="$peak" -v rss="$rss" 'BEGIN {
    flops = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
    pred = flops / (step / 1000) / g / 1e12
    pred_o = flops / (step_o / 1000) / g / 1e12
    printf "%-10s %5d %4d %3d %3d %5d  %9.1f %9.1f %+6.1f%% %8s %7.2f %6s   %9.1f %+6.1f%%\n", cfg, h, l, tp, pp, g, pub, pred,
           100 * (pred - pub) / pub, peak, wall, rss, pred_o, 100 * (pred_o - pub) / pub
    if (pred < 0.85 * pub || pred > 1.15 * pub) print "MISS"
  }')
  echo "${line%$'\n'MISS}"
  case "$line" in *MISS) MISSES=$((MISSES + 1)) ;; esac
done
echo "(TFLOP/s per GPU; error: (predicted - published) / published; peak_GiB: the simulated peak memory of the busiest rank;"
echo " sim_s and rss_GB: wall seconds and maximum resident set of one nns simulate, blocking run)"
if [ "$CHECK" = 1 ]; then
  if [ "$MISSES" -gt 0 ]; then echo "check: $MISSES row(s) outside +-15%"; exit 1; fi
  echo "check: every row within +-15%"
fi

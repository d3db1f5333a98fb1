#!/usr/bin/env bash
# The plan search's memory estimate against the capacity check's replay
# of the plan it writes (issue 31, item 3): per plan, the predicted peak
# per device and the replayed peak of one plan replica's ranks (nns plan
# checks up to 128 ranks per replica), and their ratio. The plans: GPT-3
# 175B on 1024 A100s in fp16 under each recompute mode (--recompute) and
# in fp32, and SC'21's 145.6B on one replica's 64 A100s (--vp 2).
#   bash bench/search_memory.sh [build/nns] [quick]
# quick: GPT tiny only (seconds; the big rows take 6-32 s each, 2 minutes in all).
set -u
NNS=${1:-build/nns}
QUICK=${2:-}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

row() {
  local label=$1 log best pred peak t0 t1
  shift
  t0=$(date +%s)
  log=$("$NNS" plan "$@" --top 1 --out "$TMP/out.nns" 2>&1)
  t1=$(date +%s)
  best=$(grep -E '^# Found by `nns plan`' "$TMP/out.nns" 2>/dev/null | sed -E 's/^# Found by `nns plan`: //')
  pred=$(grep -E '^  best ' <<<"$log" | sed -E 's/.*memory ([0-9.]+ [KMGT]iB).*/\1/')
  peak=$(grep -E '^  memory: peak' <<<"$log" | sed -E 's/^  memory: peak ([0-9.]+ [KMGT]iB).*/\1/')
  if [ -z "$pred" ] || [ -z "$peak" ]; then
    echo "== $label: nns plan $*: no estimate or no replay ($((t1 - t0)) s)"
    grep -E '^  best|memory|refused|no plan' <<<"$log"
    return
  fi
  local ratio
  ratio=$(awk -v p="$pred" -v r="$peak" 'function b(x, u) { split(x, u, " "); return u[1] * (u[2] == "KiB" ? 1 : u[2] == "MiB" ? 1024 : u[2] == "GiB" ? 1048576 : 1073741824) }
    BEGIN { printf "%.3f", b(p) / b(r) }')
  echo "== $label ($((t1 - t0)) s): $best"
  echo "   estimate $pred, replay $peak, estimate / replay $ratio"
}

row "GPT tiny on 2, no recompute" examples/gpt.nns --config tiny --gpus 2 --device a100 --recompute none
row "GPT tiny on 2, selective" examples/gpt.nns --config tiny --gpus 2 --device a100 --recompute selective
row "GPT tiny on 2, block" examples/gpt.nns --config tiny --gpus 2 --device a100 --recompute block
row "GPT tiny_pipe on 4 under 1400 KiB" examples/gpt.nns --config tiny_pipe --gpus 4 --device a100 --device-memory 1400KiB
[ "$QUICK" = quick ] && exit 0
A=(examples/gpt.nns --config gpt3_175b --gpus 1024 --device a100)
row "175B fp16, best" "${A[@]}" --precision fp16
row "175B fp16, no recompute" "${A[@]}" --precision fp16 --recompute none
row "175B fp16, block recompute" "${A[@]}" --precision fp16 --recompute block
row "175B fp16, selective, 1F1B" "${A[@]}" --precision fp16 --recompute selective --vp 1
row "175B fp32, best" "${A[@]}"
row "145.6B fp16 on 64, v 2" examples/gpt.nns --config sc21_145b --gpus 64 --device a100 --precision fp16 --vp 2

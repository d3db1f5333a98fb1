#!/usr/bin/env bash
# The plan search (nns plan, docs/planner.md) on the issue's two models:
#   GPT-3 175B on 1024 simulated A100s (128 nodes of 8), with and without
#   the constraint table of plan search_table (the pruning ratio, and the
#   same best plan found both ways);
#   Swin (swin_32gpu, ~27B) on 32 simulated V100s (4 nodes of 8).
# Each line: wall time of the whole command (elaborating the model, the
# search, writing and Z3-checking the plan) and the search's own time.
#   bash bench/search.sh [build/nns]
set -eu
NNS=${1:-build/nns}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

run() {
  local label=$1
  shift
  local t0 t1
  t0=$(date +%s.%N)
  "$NNS" plan "$@" --out "$TMP/out.nns" > "$TMP/log" 2>&1 || { cat "$TMP/log"; exit 1; }
  t1=$(date +%s.%N)
  echo "== $label: nns plan $* ($(echo "$t1 - $t0" | bc) s wall)"
  grep -E "^(model|search|space)|^  (best|megatron|runner)|^  +\(no Mega|vs Megatron|^check:|^  memory:" "$TMP/log"
  sed -n '/^plan searched/,/^}/p' "$TMP/out.nns" > "$TMP/$label.plan"
}

run gpt3_175b examples/gpt.nns --config gpt3_175b --gpus 1024 --device a100
run gpt3_175b_table examples/gpt.nns --config gpt3_175b --gpus 1024 --device a100 --plan search_table
if cmp -s "$TMP/gpt3_175b.plan" "$TMP/gpt3_175b_table.plan"; then
  echo "== the same best plan with and without the constraint table"
else
  echo "== the constraint table changed the best plan"
fi
run swin_32gpu examples/swin.nns --config swin_32gpu --gpus 32 --device v100

#!/usr/bin/env bash
# Whether two nns binaries elaborate the same graph, print the same plan and
# derive the same communication: `--emit=graph`, `--emit=plan` and
# `--emit=comm` (stdout and exit code) of each case, compared byte for byte.
# What a change meant to make elaboration, plan evaluation or the derivation
# faster, without changing what they produce, is checked with (OLD: a binary
# built before the change).
#   bench/derive_identical.sh OLD_NNS NEW_NNS [CASE...]
# A case is "FILE CONFIG PLAN GPUS [--set K=V ...]" (one argument, quoted);
# without cases, the shipped plans of gpt, swin, t5, alphafold2, moe and
# llama at 2-32 devices. EMITS="comm" compares only the communication
# (Swin coshard at 1024: `... "examples/swin.nns swin_32gpu coshard 1024
# --set batch=256"`, a minute or two per binary). Prints one line per case
# and stage; exits 1 if any differs.
set -uo pipefail
OLD="$1"
NEW="$2"
shift 2
cd "$(dirname "$0")/.."
cases=("$@")
if [ ${#cases[@]} -eq 0 ]; then
  cases=(
    "examples/gpt.nns tiny dp 2" "examples/gpt.nns tiny megatron 4" "examples/gpt.nns tiny hybrid 8"
    "examples/gpt.nns tiny_pipe pipeline 2" "examples/gpt.nns tiny zero_bubble 2" "examples/gpt.nns tiny dp_zero1 4"
    "examples/gpt.nns tiny_sc21_tp2 megatron_sc21 2"
    "examples/swin.nns tiny dp 2" "examples/swin.nns tiny megatron 2" "examples/swin.nns tiny coshard 2"
    "examples/swin.nns tiny_pipe pipeline_coshard 8" "examples/swin.nns swin_32gpu coshard 32"
    "examples/t5.nns tiny dp 2" "examples/t5.nns tiny pipeline 4" "examples/t5.nns tiny interlaced 2" "examples/t5.nns tiny heads 2"
    "examples/t5.nns nnscaler_4gpu interlaced 4"
    "examples/alphafold2.nns tiny dap 2" "examples/alphafold2.nns tiny pipeline3f1b 2" "examples/alphafold2.nns published dap 32"
    "examples/moe.nns tiny dp 4" "examples/moe.nns tiny ep 4" "examples/moe.nns tiny ep_recompute 4"
    "examples/llama.nns tiny dp 4" "examples/llama.nns tiny megatron 4" "examples/llama.nns tiny hybrid 4"
    "examples/llama.nns llama3_8b hybrid 16"
  )
fi
EMITS="${EMITS:-graph plan comm}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
differ=0
for c in "${cases[@]}"; do
  read -r file config plan gpus rest <<<"$c"
  # shellcheck disable=SC2206
  extra=($rest)
  for emit in $EMITS; do
    "$OLD" check "$file" --config "$config" --plan "$plan" --gpus "$gpus" "${extra[@]}" --emit="$emit" >"$tmp/old" 2>"$tmp/old.err"
    old_rc=$?
    "$NEW" check "$file" --config "$config" --plan "$plan" --gpus "$gpus" "${extra[@]}" --emit="$emit" >"$tmp/new" 2>"$tmp/new.err"
    new_rc=$?
    if [ "$old_rc" = "$new_rc" ] && cmp -s "$tmp/old" "$tmp/new"; then
      echo "same    $emit  $c  (exit $new_rc, $(wc -c <"$tmp/new") bytes)"
    else
      echo "DIFFERS $emit  $c  (exit $old_rc -> $new_rc)"
      diff "$tmp/old" "$tmp/new" | head -5 | cut -c1-200
      differ=1
    fi
  done
done
exit $differ

#!/usr/bin/env bash
# Pretrained weights in Hugging Face's layout through the shipped `weights`
# maps (docs/language.md "Pretrained weights"), against an independent
# PyTorch implementation of each model (tests/data/hf_reference.py, float64):
#   - GPT-2 small's shapes (12 layers, 50257 tokens), F32, one file, the
#     "gpt2" checkpoint's names (causal-mask buffers ignored): logits within
#     1e-5 of PyTorch's;
#   - GPT-2 (2 layers) in BF16, sharded in 3 files with an index, names under
#     "transformer.": logits within 1e-5;
#   - Llama (examples/llama.nns tiny: GQA, rotary, SwiGLU, RMSNorm) through
#     hf_llama: logits within 1e-5; without lm_head.weight it is refused,
#     and loads with --init-partial, which lists the head;
#   - a checkpoint tensor no entry reads, a slice outside its tensor and an
#     unknown map are refused with located errors (exit 65, 65, 64);
#   - nns ckpt export writes a trained checkpoint back in GPT-2's layout, and
#     that file loads through the map to the same evaluation losses.
#   pretrained.sh NNS_BINARY
set -euo pipefail
NNS="$1"
cd "$(dirname "$0")/../.."
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

PY=""
for candidate in /usr/bin/python3 python3; do
  if "$candidate" -c "import torch" > /dev/null 2>&1; then PY="$candidate"; break; fi
done
[ -n "$PY" ] || fail "no python3 with torch (scripts/setup.sh installs Debian's python3-torch)"
REF="$PY tests/data/hf_reference.py"

# Runs nns's forward pass on DIR's weights and tokens, writing the logits.
logits() {  # FILE MAP DIR OUT [nns flags...]
  local file="$1" map="$2" dir="$3" out="$4"
  shift 4
  "$NNS" run "$file" --eval --steps 1 --init "$dir" --init-map "$map" --data "$dir/data.safetensors" --dump-outputs "$out" "$@" > "$out.log" 2>&1 ||
    fail "nns run $file ($map, $dir): $(tail -5 "$out.log")"
}

# GPT-2 small's shapes, F32, the "gpt2" checkpoint's names.
mkdir "$tmp/gpt2"
$REF make gpt2 "$tmp/gpt2" --seq 64
logits examples/gpt.nns hf_gpt2 "$tmp/gpt2" "$tmp/gpt2.out" --config gpt2 --set seq=64
grep -q "through weights hf_gpt2: 196 parameter(s)" "$tmp/gpt2.out.log" || fail "import line: $(head -3 "$tmp/gpt2.out.log")"
grep -q "12 tensor(s) of .* ignored by the map" "$tmp/gpt2.out.log" || fail "the causal-mask buffers were not reported as ignored"
$REF compare gpt2 "$tmp/gpt2" "$tmp/gpt2.out" || fail "GPT-2 small logits differ from PyTorch's"

# BF16, 3 shards and an index, GPT2LMHeadModel's "transformer." names.
mkdir "$tmp/gpt2_bf16"
$REF make gpt2 "$tmp/gpt2_bf16" --seq 64 --layers 2 --dtype BF16 --shards 3 --prefix transformer.
logits examples/gpt.nns hf_gpt2 "$tmp/gpt2_bf16" "$tmp/gpt2_bf16.out" --config gpt2 --set seq=64 --set layers=2
grep -q "in 3 file(s)" "$tmp/gpt2_bf16.out.log" || fail "the sharded checkpoint was not read as 3 files: $(head -3 "$tmp/gpt2_bf16.out.log")"
$REF compare gpt2 "$tmp/gpt2_bf16" "$tmp/gpt2_bf16.out" || fail "sharded BF16 GPT-2 logits differ"

# Llama tiny through hf_llama.
mkdir "$tmp/llama"
$REF make llama "$tmp/llama" --seq 16
logits examples/llama.nns hf_llama "$tmp/llama" "$tmp/llama.out" --config tiny --set batch=1
$REF compare llama "$tmp/llama" "$tmp/llama.out" || fail "Llama logits differ from PyTorch's"

# Refusals: an extra tensor, a missing head (and --init-partial), a slice
# past wpe's 1024 rows, an unknown map.
expect() {  # CODE PATTERN LOG
  [ "$4" = "$1" ] || fail "exit $4, expected $1: $(cat "$3")"
  grep -q -- "$2" "$3" || fail "expected '$2' in: $(cat "$3")"
}
mkdir "$tmp/extra" "$tmp/nohead"
$REF make llama "$tmp/extra" --seq 16 --extra model.layers.0.mlp.unexpected
rc=0; "$NNS" run examples/llama.nns --config tiny --eval --steps 1 --init "$tmp/extra" --init-map hf_llama > "$tmp/e1.log" 2>&1 || rc=$?
expect 65 "holds 1 tensor(s) that weights 'hf_llama' reads nowhere: model.layers.0.mlp.unexpected" "$tmp/e1.log" "$rc"
grep -q "llama.nns:[0-9]*:[0-9]*: error" "$tmp/e1.log" || fail "not located: $(cat "$tmp/e1.log")"
$REF make llama "$tmp/nohead" --seq 16 --drop lm_head.weight
rc=0; "$NNS" run examples/llama.nns --config tiny --eval --steps 1 --init "$tmp/nohead" --init-map hf_llama > "$tmp/e2.log" 2>&1 || rc=$?
expect 65 "has no tensor 'lm_head.weight' for parameter 'head'" "$tmp/e2.log" "$rc"
"$NNS" run examples/llama.nns --config tiny --eval --steps 1 --init "$tmp/nohead" --init-map hf_llama --init-partial > "$tmp/p.log" 2>&1 ||
  fail "--init-partial: $(tail -3 "$tmp/p.log")"
grep -q "1 parameter(s) keep their initializers" "$tmp/p.log" && grep -q "^  head (no 'lm_head.weight'" "$tmp/p.log" || fail "--init-partial did not list the head: $(cat "$tmp/p.log")"
rc=0; "$NNS" run examples/gpt.nns --config gpt2 --set seq=2048 --eval --steps 1 --init "$tmp/gpt2" --init-map hf_gpt2 > "$tmp/e3.log" 2>&1 || rc=$?
expect 65 "slice \[0, 2048) of axis 0 is outside 'wpe.weight' \[1024, 768\]" "$tmp/e3.log" "$rc"
rc=0; "$NNS" run examples/gpt.nns --config gpt2 --eval --steps 1 --init "$tmp/gpt2" --init-map hf_gtp2 > "$tmp/e4.log" 2>&1 || rc=$?
expect 64 "unknown weights map 'hf_gtp2' (did you mean 'hf_gpt2'?)" "$tmp/e4.log" "$rc"

# Export: a step of training from the BF16 checkpoint, saved; exported in
# GPT-2's layout; loaded back through the map: the same evaluation losses
# as the saved checkpoint loaded by name.
small=(--config gpt2 --set seq=64 --set layers=2)
"$NNS" run examples/gpt.nns "${small[@]}" --steps 1 --init "$tmp/gpt2_bf16" --init-map hf_gpt2 --data "$tmp/gpt2_bf16/data.safetensors" \
  --save "$tmp/trained.safetensors" > "$tmp/train.log" 2>&1 || fail "training from the HF checkpoint: $(tail -3 "$tmp/train.log")"
"$NNS" ckpt export "$tmp/trained.safetensors" examples/gpt.nns "${small[@]}" --map hf_gpt2 -o "$tmp/export.safetensors" > "$tmp/export.log" 2>&1 ||
  fail "ckpt export: $(cat "$tmp/export.log")"
grep -q "wrote .*export.safetensors: 28 tensor(s)" "$tmp/export.log" || fail "export: $(cat "$tmp/export.log")"
grep -q "'wpe.weight' is written with the model's 64 along axis 0" "$tmp/export.log" || fail "export did not note wpe's cut: $(cat "$tmp/export.log")"
eval_losses() { "$NNS" run examples/gpt.nns "${small[@]}" --eval --steps 2 --data "$tmp/gpt2_bf16/data.safetensors" "$@" | grep "^eval "; }
a=$(eval_losses --resume "$tmp/trained.safetensors")
b=$(eval_losses --init "$tmp/export.safetensors" --init-map hf_gpt2)
[ -n "$a" ] && [ "$a" = "$b" ] || fail "the exported checkpoint evaluates differently: '$a' vs '$b'"
echo "PASS: GPT-2 small, sharded BF16 GPT-2 and Llama logits equal PyTorch's within 1e-5; refusals located; export round-trips"

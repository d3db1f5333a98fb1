#!/usr/bin/env bash
# Checkpoint shards of a partitioned run merge into one checkpoint that
# resumes on one device and under another plan on another number of ranks,
# giving the same losses (relative difference <= 1e-5), and a missing shard
# is reported by name.
#   ckpt_roundtrip.sh NNS_BINARY
set -euo pipefail
NNS="$1"
cd "$(dirname "$0")/../.."
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

"$NNS" run examples/gpt.nns --config tiny --gpus 2 --plan megatron --steps 4 --save "$tmp/shards" > "$tmp/a.log"
ls "$tmp/shards"/rank-0.safetensors "$tmp/shards"/rank-1.safetensors > /dev/null
"$NNS" ckpt merge "$tmp/shards" -o "$tmp/ck.safetensors" | grep -q "merged 2 shard(s)"

losses() { sed -n 's/^step *\([0-9]*\)\/[0-9]*  loss \([0-9.]*\).*/\1 \2/p' "$1"; }
"$NNS" run examples/gpt.nns --config tiny --steps 7 --resume "$tmp/ck.safetensors" > "$tmp/one.log"
"$NNS" run examples/gpt.nns --config tiny --gpus 4 --plan hybrid --steps 7 --resume "$tmp/ck.safetensors" > "$tmp/hybrid.log"
[ "$(losses "$tmp/one.log" | cut -d' ' -f1 | tr '\n' ' ')" = "5 6 7 " ] || { echo "one device did not resume at step 5"; cat "$tmp/one.log"; exit 1; }
paste <(losses "$tmp/one.log") <(losses "$tmp/hybrid.log") | awk '
  { d = $2 - $4; if (d < 0) d = -d; r = d / $2; if (r > worst) worst = r; n++ }
  END { printf "resumed losses: %d steps compared, largest relative difference %.2e\n", n, worst; if (n != 3 || worst > 1e-5) exit 1 }'

# A missing shard is an error that names an uncovered tensor.
rm "$tmp/shards/rank-1.safetensors"
if "$NNS" ckpt merge "$tmp/shards" -o "$tmp/bad.safetensors" 2> "$tmp/err.log"; then echo "merge of an incomplete set succeeded"; exit 1; fi
grep -q "is not covered by the shards" "$tmp/err.log" || { cat "$tmp/err.log"; exit 1; }
echo "PASS"

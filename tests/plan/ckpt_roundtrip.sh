#!/usr/bin/env bash
# Checkpoint shards of a partitioned run merge into one checkpoint that
# resumes on one device and under another plan on another number of ranks,
# giving the same losses (relative difference <= 1e-5); the shard folder
# resumes directly too; a missing shard makes the save torn, said by name.
# Ranks without --plan (the implicit data-parallel plan) save one
# single-device file, which resumes on them and on one device.
#   ckpt_roundtrip.sh NNS_BINARY
set -euo pipefail
NNS="$1"
cd "$(dirname "$0")/../.."
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

"$NNS" run examples/gpt.nns --config tiny --gpus 2 --plan megatron --steps 7 --stop-after 4 --save "$tmp/shards" > "$tmp/a.log"
[ "$(cat "$tmp/shards/latest")" = "step-4" ] || { echo "latest does not name step-4"; ls -R "$tmp/shards"; exit 1; }
ls "$tmp/shards"/step-4/rank-0.safetensors "$tmp/shards"/step-4/rank-1.safetensors "$tmp/shards/step-4/manifest" > /dev/null
"$NNS" ckpt merge "$tmp/shards" -o "$tmp/ck.safetensors" | grep -q "merged 2 shard(s)"

losses() { sed -n 's/^step *\([0-9]*\)\/[0-9]*  loss \([0-9.]*\).*/\1 \2/p' "$1"; }
"$NNS" run examples/gpt.nns --config tiny --steps 7 --resume "$tmp/ck.safetensors" > "$tmp/one.log"
"$NNS" run examples/gpt.nns --config tiny --gpus 4 --plan hybrid --steps 7 --resume "$tmp/ck.safetensors" > "$tmp/hybrid.log"
"$NNS" run examples/gpt.nns --config tiny --gpus 2 --plan dp --steps 7 --resume "$tmp/shards" > "$tmp/folder.log"
[ "$(losses "$tmp/one.log" | cut -d' ' -f1 | tr '\n' ' ')" = "5 6 7 " ] || { echo "one device did not resume at step 5"; cat "$tmp/one.log"; exit 1; }
for other in hybrid folder; do
  paste <(losses "$tmp/one.log") <(losses "$tmp/$other.log") | awk -v who="$other" '
    { d = $2 - $4; if (d < 0) d = -d; r = d / $2; if (r > worst) worst = r; n++ }
    END { printf "resumed losses (%s): %d steps compared, largest relative difference %.2e\n", who, n, worst; if (n != 3 || worst > 1e-5) exit 1 }'
done

# Without --plan: one file, resumed on 2 ranks as if never stopped, and on one device.
"$NNS" run examples/gpt.nns --config tiny --gpus 2 --steps 7 > "$tmp/dp.log"
"$NNS" run examples/gpt.nns --config tiny --gpus 2 --steps 7 --stop-after 4 --save "$tmp/dp.safetensors" > "$tmp/dp_a.log"
[ -f "$tmp/dp.safetensors" ] || { echo "--gpus 2 without a plan did not write one file"; ls -la "$tmp"; exit 1; }
"$NNS" run examples/gpt.nns --config tiny --gpus 2 --steps 7 --resume "$tmp/dp.safetensors" > "$tmp/dp_b.log"
"$NNS" run examples/gpt.nns --config tiny --steps 7 --resume "$tmp/dp.safetensors" > "$tmp/dp_one.log"
[ "$(losses "$tmp/dp_one.log" | cut -d' ' -f1 | tr '\n' ' ')" = "5 6 7 " ] || { echo "one device did not resume the 2-rank file at step 5"; cat "$tmp/dp_one.log"; exit 1; }
paste <(losses "$tmp/dp.log" | tail -3) <(losses "$tmp/dp_b.log") | awk '
  { d = $2 - $4; if (d < 0) d = -d; r = d / $2; if (r > worst) worst = r; n++ }
  END { printf "resumed losses (2 ranks, no plan): %d steps compared, largest relative difference %.2e\n", n, worst; if (n != 3 || worst > 1e-5) exit 1 }'

# A missing shard makes the save torn: merge and resume refuse it (exit 65).
rm "$tmp/shards/step-4/rank-1.safetensors"
rc=0; "$NNS" ckpt merge "$tmp/shards" -o "$tmp/bad.safetensors" 2> "$tmp/err.log" || rc=$?
[ "$rc" = 65 ] || { echo "merge of a torn save: exit $rc, expected 65"; cat "$tmp/err.log"; exit 1; }
grep -q "step-4/rank-1.safetensors: missing (the checkpoint 'step-4' is torn)" "$tmp/err.log" || { cat "$tmp/err.log"; exit 1; }
echo "PASS"

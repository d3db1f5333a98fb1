#!/usr/bin/env bash
# Validation while training (driver/validation.h), on examples/gpt.nns tiny
# trained on a byte-tokenised corpus (scripts/make_token_corpus.py) with its
# held-out val.bin as val_data, every 3 steps over 2 batches:
#   - one device, the dp plan on 2 ranks and megatron on 2 ranks print the
#     same validation losses (1e-5), at steps 3, 6 and 9 only, also in the
#     --metrics JSONL ("val_loss"), and the validation loss falls;
#   - validating does not change the training: the same losses without it;
#   - --save-best saves at the lowest validation loss: that checkpoint,
#     evaluated by --eval on the validation data, gives that loss;
#   - --save-best without validation is a usage error (exit 64).
#   validation.sh NNS_BINARY
set -euo pipefail
NNS="$1"
cd "$(dirname "$0")/../.."
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

python3 scripts/make_token_corpus.py docs/*.md -o "$tmp/corpus" > /dev/null
train="token_file(\"$tmp/corpus/train.bin\", seed = 3)"
val="token_file(\"$tmp/corpus/val.bin\", seed = 5)"
sed "s|  data = synthetic(seed = 1)|  data = $train\n  val_data = $val\n  eval_every = 3\n  eval_batches = 2|" examples/gpt.nns > "$tmp/val.nns"
sed "s|  data = synthetic(seed = 1)|  data = $train|" examples/gpt.nns > "$tmp/plain.nns"
sed "s|  data = synthetic(seed = 1)|  data = $val|" examples/gpt.nns > "$tmp/on_val.nns"
grep -q "eval_every = 3" "$tmp/val.nns" && grep -q "val.bin" "$tmp/on_val.nns" || fail "the data line of examples/gpt.nns changed"

vals() { sed -n 's/^  validation loss \([0-9.]*\).*/\1/p' "$1"; }
losses() { sed -n 's/^step *\([0-9]*\)\/[0-9]*  loss \([0-9.]*\).*/\1 \2/p' "$1"; }
"$NNS" run "$tmp/val.nns" --config tiny --steps 9 --metrics "$tmp/one.jsonl" --save-best "$tmp/best.safetensors" > "$tmp/one.log" 2>&1 ||
  fail "one device: $(tail -3 "$tmp/one.log")"
[ "$(vals "$tmp/one.log" | wc -l)" = 3 ] || fail "expected 3 validation losses: $(cat "$tmp/one.log")"
steps=$(python3 -c '
import json, sys
print(" ".join(str(r["step"]) for r in map(json.loads, open(sys.argv[1])) if "val_loss" in r))' "$tmp/one.jsonl")
[ "$steps" = "3 6 9" ] || fail "val_loss logged at steps '$steps', expected 3 6 9"
[ "$(python3 -c '
import json, sys
print("\n".join("%.6f" % r["val_loss"] for r in map(json.loads, open(sys.argv[1])) if "val_loss" in r))' "$tmp/one.jsonl")" = "$(vals "$tmp/one.log")" ] ||
  fail "the JSONL val_loss differs from the printed one"
vals "$tmp/one.log" | awk 'NR == 1 { first = $1 } { last = $1 } END { printf "validation loss %s -> %s\n", first, last; exit !(last < first - 0.1) }' ||
  fail "the validation loss did not fall"

for run in "--plan dp --gpus 2" "--plan megatron --gpus 2"; do
  # shellcheck disable=SC2086
  "$NNS" run "$tmp/val.nns" --config tiny --steps 9 $run > "$tmp/plan.log" 2>&1 || fail "$run: $(tail -3 "$tmp/plan.log")"
  paste <(vals "$tmp/one.log") <(vals "$tmp/plan.log") | awk -v who="$run" '
    { d = $1 - $2; if (d < 0) d = -d; r = d / $1; if (r > worst) worst = r; n++ }
    END { printf "%s vs one device: %d validation losses, largest relative difference %.2e\n", who, n, worst; exit !(n == 3 && worst <= 1e-5) }' ||
    fail "$run: the validation losses differ from one device's"
done

"$NNS" run "$tmp/plain.nns" --config tiny --steps 9 > "$tmp/plain.log" 2>&1 || fail "without validation: $(tail -3 "$tmp/plain.log")"
[ "$(losses "$tmp/plain.log")" = "$(losses "$tmp/one.log")" ] || fail "validating changed the training losses"

# The best checkpoint: the step of the lowest validation loss, which --eval reproduces.
best_step=$(vals "$tmp/one.log" | awk '{ if (NR == 1 || $1 < best) { best = $1; step = NR * 3 } } END { print step }')
best_loss=$(vals "$tmp/one.log" | sort -n | head -1)
grep -q "validation loss $best_loss  (best; checkpoint: $tmp/best.safetensors (step $best_step))" "$tmp/one.log" ||
  fail "no best-checkpoint line at step $best_step: $(cat "$tmp/one.log")"
# --init takes weights only: the optimizer state is left out of a copy.
python3 - "$tmp/best.safetensors" "$tmp/best_weights.safetensors" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header, data = json.loads(raw[8:8 + n]), raw[8 + n:]
out, blobs, at = {}, [], 0
for name, t in header.items():
    if name == "__metadata__" or name.startswith("optimizer."):
        continue
    b, e = t["data_offsets"]
    out[name] = dict(t, data_offsets=[at, at + e - b])
    blobs.append(data[b:e]); at += e - b
text = json.dumps(out).encode()
open(sys.argv[2], "wb").write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
PY
eval_loss=$("$NNS" run "$tmp/on_val.nns" --config tiny --eval --steps 2 --init "$tmp/best_weights.safetensors" | sed -n 's/^eval: mean loss \([0-9.]*\).*/\1/p')
[ "$eval_loss" = "$best_loss" ] || fail "--eval of the best checkpoint gives $eval_loss, validation said $best_loss"
echo "best checkpoint: step $best_step, validation loss $best_loss, --eval $eval_loss"

rc=0; out=$("$NNS" run "$tmp/plain.nns" --config tiny --steps 1 --save-best "$tmp/x.safetensors" 2>&1) || rc=$?
[ "$rc" = 64 ] && grep -q "save-best needs validation" <<< "$out" || fail "--save-best without validation: exit $rc, $out"
echo PASS

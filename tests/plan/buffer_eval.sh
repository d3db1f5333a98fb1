#!/usr/bin/env bash
# A model buffer in checkpoints, and --eval (tests/plan/plans/buffer.nns):
# the checkpoint holds the buffer (no optimizer state for it) and --resume
# reads it back; --eval gives the same losses on every run and the same
# with dropout 0.3 as with none, while training with dropout differs.
#   buffer_eval.sh NNS_BINARY
set -uo pipefail
NNS="$1"
cd "$(dirname "$0")/../.."
model=tests/plan/plans/buffer.nns
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$NNS" run $model --config small --save "$tmp/one.safetensors" > "$tmp/train.txt" || fail "training with --save"
"$NNS" run $model --config small --plan seqsplit --gpus 2 --save "$tmp/shards" > /dev/null || fail "plan training with --save"
"$NNS" ckpt merge "$tmp/shards" -o "$tmp/merged.safetensors" > /dev/null || fail "ckpt merge"
for f in one merged; do
  # The safetensors header is JSON text at the start of the file.
  header=$(head -c 4096 "$tmp/$f.safetensors" | tr -d '\0')
  grep -qa '"angles"' <<<"$header" || fail "$f checkpoint has no buffer 'angles'"
  grep -qa 'optimizer[^"]*angles' <<<"$header" && fail "$f checkpoint has optimizer state for the buffer"
done
# Single-device and plan checkpoints of the same run evaluate alike (the buffer and weights round-trip).
"$NNS" run $model --config small --eval --resume "$tmp/one.safetensors" > "$tmp/e1.txt" || fail "eval"
"$NNS" run $model --config small --eval --resume "$tmp/one.safetensors" > "$tmp/e2.txt" || fail "eval (again)"
"$NNS" run $model --config nodrop --eval --resume "$tmp/one.safetensors" > "$tmp/e3.txt" || fail "eval without dropout"
"$NNS" run $model --config small --eval --resume "$tmp/shards" > "$tmp/e4.txt" || fail "eval of the plan's shards"
grep -q "forward only (dropout off, no update)" "$tmp/e1.txt" || fail "no eval banner: $(cat "$tmp/e1.txt")"
grep '^eval' "$tmp/e1.txt" > "$tmp/l1"; grep '^eval' "$tmp/e2.txt" > "$tmp/l2"; grep '^eval' "$tmp/e3.txt" > "$tmp/l3"
[ -s "$tmp/l1" ] || fail "no eval losses"
# Under a plan: the same losses as one device, and a forward-only program.
"$NNS" run $model --config small --eval --resume "$tmp/one.safetensors" --plan seqsplit --gpus 2 > "$tmp/e5.txt" || fail "eval under a plan"
grep '^eval' "$tmp/e5.txt" > "$tmp/l5p"
cmp -s "$tmp/l1" "$tmp/l5p" || fail "--eval under a plan differs from one device: $(diff "$tmp/l1" "$tmp/l5p")"
prog=$("$NNS" run $model --config small --eval --plan seqsplit --gpus 2 --emit=program) || fail "--eval --emit=program"
grep -q ' forward ' <<<"$prog" || fail "the eval program runs no forward"
grep -qiE 'backward|update' <<<"$prog" && fail "the eval program has a backward or an update"
cmp -s "$tmp/l1" "$tmp/l2" || fail "--eval differs between runs: $(diff "$tmp/l1" "$tmp/l2")"
cmp -s "$tmp/l1" "$tmp/l3" || fail "--eval depends on dropout: $(diff "$tmp/l1" "$tmp/l3")"
m1=$(grep '^eval: mean' "$tmp/e1.txt" | awk '{print $4}'); m4=$(grep '^eval: mean' "$tmp/e4.txt" | awk '{print $4}')
awk -v a="$m1" -v b="$m4" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-5 * a) }' || fail "plan checkpoint evaluates to $m4, single-device $m1"
# Dropout is on in training: the two configs train differently.
"$NNS" run $model --config nodrop > "$tmp/train0.txt" || fail "training without dropout"
[ "$(grep '^done' "$tmp/train.txt")" != "$(grep '^done' "$tmp/train0.txt")" ] || fail "dropout had no effect on training"
# The evaluation does not train: its loss is the checkpoint's whatever the number of steps.
"$NNS" run $model --config small --eval --steps 1 --resume "$tmp/one.safetensors" | grep '^eval ' > "$tmp/l5"
[ "$(head -1 "$tmp/l1" | awk '{print $NF}')" = "$(awk '{print $NF}' "$tmp/l5")" ] || fail "--eval --steps 1 differs from the first step of --eval"
# Resuming a checkpoint with the buffer continues the run exactly, on one device and under a plan.
"$NNS" run $model --config small --stop-after 2 --save "$tmp/half.safetensors" > /dev/null || fail "2 steps with --save"
whole=$(grep '^done' "$tmp/train.txt" | sed 's/.*-> \([0-9.]*\),.*/\1/')
for args in "" "--plan seqsplit --gpus 2"; do
  # shellcheck disable=SC2086
  rest=$("$NNS" run $model --config small $args --resume "$tmp/half.safetensors" | grep '^done' | sed 's/.*-> \([0-9.]*\),.*/\1/')
  [ -n "$rest" ] && [ "$rest" = "$whole" ] || fail "resumed run ($args) ends at loss '$rest', the whole run at '$whole'"
done
# A weights file for --init may leave the buffer out (it keeps its
# initializer); a checkpoint for --resume may not.
cat > "$tmp/nobuf.nns" <<'NNS'
model Rotary(s, d) {
  param wq: [d, d] = normal(0.2)
  param wo: [d, d] = normal(0.2)
  fn forward(x) { return linear(gelu(linear(x, wq)), wo) }
}
train {
  model = Rotary(8, 16)
  input x: [4, 8, 16] = randn()
  input y: [4, 8, 16] = randn()
  loss = mse(model(x), y)
  optimizer = sgd(lr = 0.1)
  steps = 1
}
NNS
"$NNS" run "$tmp/nobuf.nns" --save "$tmp/nobuf.safetensors" > /dev/null || fail "training the model without the buffer"
"$NNS" run $model --config small --steps 1 --init "$tmp/nobuf.safetensors" > /dev/null || fail "--init without the buffer"
"$NNS" run $model --config small --plan dp --gpus 2 --steps 1 --init "$tmp/nobuf.safetensors" > /dev/null || fail "--init without the buffer, plan"
out=$("$NNS" run $model --config small --steps 1 --resume "$tmp/nobuf.safetensors" 2>&1); rc=$?
[ $rc = 65 ] && grep -q "missing tensor 'angles'" <<<"$out" || fail "--resume without the buffer: exit $rc, $out"
echo "buffer_eval: the buffer is checkpointed without optimizer state; --eval is deterministic and dropout-free"

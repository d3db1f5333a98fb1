#!/usr/bin/env bash
# The U-Net's pipeline stages (examples/unet.nns, plan pipeline: stages by
# structure over its down levels, middle blocks and up levels):
# - on 2 stages, both skip connections cross the stage boundary: --emit=comm
#   sends each down level's skip to the up level that concatenates it
#   (forward, and its gradient back), once per micro-batch;
# - a stage assignment broken on purpose (in a temp copy): the concat that
#   joins down.0's skip is put on stage 0, with the skip's producer, as the
#   issue's user got when loose upsample/concat ops fell into stage 0. The
#   checker refuses it with an op-order cycle that names the tensor flowing
#   back, both ops with their lines and stages, and the reassignment.
#   unet_stages.sh NNS_BINARY
set -uo pipefail
NNS="$1"
cd "$(dirname "$0")/../.."
export NO_COLOR=1
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail=0

if ! comm="$("$NNS" check examples/unet.nns --config tiny_pipe --plan pipeline --gpus 2 --emit=comm 2>"$tmp/err")"; then
  echo "FAIL: check --emit=comm: $(tail -3 "$tmp/err")"
  exit 1
fi
for skip in 'down\.0\.[^ ]* -> up\.1\.concat#0' 'down\.1\.[^ ]* -> up\.0\.concat#0'; do
  fwd="$(grep -A2 -E "^  forward %[0-9]+ f32\[[0-9, ]+\]: $skip\$" <<<"$comm")"
  if ! grep -q 'send/recv pairs {0->1}' <<<"$fwd"; then echo "FAIL: no forward send of the skip /$skip/ from stage 0 to 1"; fail=1; fi
  if ! grep -qE "^  backward grad %[0-9]+ f32\[[0-9, ]+\]: up\.[01]\.concat#0 -> down\." <<<"$comm"; then
    echo "FAIL: no backward send of a skip's gradient"; fail=1
  fi
done

cp examples/unet.nns "$tmp/unet.nns"
cat >>"$tmp/unet.nns" <<'EOF'
plan broken(ngpus) {
  let stages = pipeline_stages(2, blocks = ["down", "mid", "up"])
  let join = [op for op in stages[1] if matches(op, "up.1.concat*")]
  let rest = [op for op in stages[1] if not matches(op, "up.1.concat*")]
  assign(stages[0] + join, 0)
  assign(rest, 1)
  schedule("1f1b", [stages[0] + join, rest])
}
EOF
concat_line="$(grep -n 'x = concat(\[x, skip\], dim = 1)' examples/unet.nns | cut -d: -f1)"
out="$("$NNS" check "$tmp/unet.nns" --config tiny_pipe --plan broken --gpus 2 2>&1)"
rc=$?
if [ $rc != 65 ]; then echo "FAIL: the broken stage assignment exits $rc, expected 65: $(tail -3 <<<"$out")"; fail=1; fi
err="$(grep -E ': error: op-order cycle' <<<"$out")"
want="is read by 'up.1.concat#0' (line $concat_line, in stage 0); a pipeline's data flows to the same or a later stage: put 'up.1.concat#0' in stage 1 or later"
if [ -z "$concat_line" ] || ! grep -qE "tensor t[0-9]+ of 'up\.0\.[^']+' \(line [0-9]+, in stage 1\) " <<<"$err" ||
  ! grep -qF "$want" <<<"$err"; then
  echo "FAIL: the cycle does not name the tensor, the concat (line $concat_line) and the fix:"
  echo "$out" | head -8
  fail=1
fi
[ $fail = 0 ] && echo "PASS: the U-Net's skips cross the 2-stage boundary; a concat put on the wrong stage is refused naming tensor, ops and fix"
exit $fail

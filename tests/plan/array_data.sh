#!/usr/bin/env bash
# .npy arrays as input data (arrays({x: "x.npy", y: "y.npy"})) on
# examples/01_mlp.nns: the loss falls on a learnable regression, 3 + 3
# steps resumed = 6 unbroken bit for bit (one device), dp over 2 ranks
# reads the samples one device reads, and bad files exit 65 naming the file.
#   array_data.sh NNS_BINARY
set -euo pipefail
NNS="$1"
cd "$(dirname "$0")/../.."
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

python3 tests/data/write_npy.py --regression "$tmp" 64 32
model() { sed "s|data = synthetic(seed = 7)|data = $1|" examples/01_mlp.nns > "$2"; grep -qF "data = $1" "$2"; }
model "arrays({x: \"$tmp/x.npy\", y: \"$tmp/y.npy\"}, seed = 2)" "$tmp/m.nns"
losses() { sed -n 's/^step *\([0-9]*\)\/[0-9]*  loss \([0-9.e-]*\).*/\1 \2/p' "$1"; }

"$NNS" run "$tmp/m.nns" --steps 20 > "$tmp/train.log"
first=$(losses "$tmp/train.log" | head -1 | cut -d' ' -f2)
last=$(losses "$tmp/train.log" | tail -1 | cut -d' ' -f2)
awk -v a="$first" -v b="$last" 'BEGIN { printf "arrays: loss %s -> %s over 20 steps\n", a, b; exit !(b < a / 2) }' || { echo "FAIL: the loss did not halve"; exit 1; }

"$NNS" run "$tmp/m.nns" --steps 6 --save "$tmp/full6.safetensors" > "$tmp/full.log"
"$NNS" run "$tmp/m.nns" --steps 6 --stop-after 3 --save "$tmp/ck.safetensors" > "$tmp/a.log"
"$NNS" run "$tmp/m.nns" --steps 6 --resume "$tmp/ck.safetensors" --save "$tmp/res6.safetensors" > "$tmp/b.log"
[ "$(losses "$tmp/a.log"; losses "$tmp/b.log")" = "$(losses "$tmp/full.log")" ] || { echo "FAIL: 3 + resumed 3 differ from 6 unbroken"; exit 1; }
cmp "$tmp/full6.safetensors" "$tmp/res6.safetensors" || { echo "FAIL: the resumed step-6 checkpoint differs"; exit 1; }
"$NNS" run "$tmp/m.nns" --steps 6 --plan dp --gpus 2 > "$tmp/dp.log"
paste <(losses "$tmp/full.log") <(losses "$tmp/dp.log") | awk '
  { d = $2 - $4; if (d < 0) d = -d; r = d / $2; if (r > worst) worst = r; n++ }
  END { printf "dp on 2 ranks vs one device: %d steps, largest relative difference %.2e\n", n, worst; if (n != 6 || worst > 1e-5) exit 1 }' ||
  { echo "FAIL: dp read other samples"; exit 1; }

bad() {  # bad DATA_EXPR EXPECTED_MESSAGE
  model "$1" "$tmp/bad.nns"
  local rc=0; "$NNS" run "$tmp/bad.nns" --steps 1 > /dev/null 2> "$tmp/err" || rc=$?
  [ "$rc" = 65 ] && grep -qF -- "$2" "$tmp/err" || { echo "FAIL: $1: exit $rc, expected 65 and '$2'"; cat "$tmp/err"; exit 1; }
}
printf 'not an npy file' > "$tmp/junk.npy"
bad "arrays({x: \"$tmp/junk.npy\", y: \"$tmp/y.npy\"})" "$tmp/junk.npy: not a .npy file (wrong magic)"
python3 tests/data/write_npy.py "$tmp/f8.npy" '<f2' 64,31 $(seq 1 1984)
bad "arrays({x: \"$tmp/f8.npy\", y: \"$tmp/y.npy\"})" "$tmp/f8.npy: shape [64, 31] does not fit input 'x'"
head -c 200 "$tmp/x.npy" > "$tmp/cut.npy"
bad "arrays({x: \"$tmp/cut.npy\", y: \"$tmp/y.npy\"})" "$tmp/cut.npy: 72 data bytes"
bad "arrays({x: \"$tmp/x.npy\"})" "no file for the model's input 'y'"
echo "PASS"

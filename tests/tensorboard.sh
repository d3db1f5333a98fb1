#!/usr/bin/env bash
# nns run --tensorboard DIR: an event file that tests/data/read_tfevents.py
# (a reader written from the TFRecord and Event definitions) reads with every
# CRC checked: file_version first, then each step's loss, lr, gradient norm,
# throughput and peak memory, and the validation loss at eval_every steps,
# equal to the --metrics values as float32. A flipped byte fails the CRC.
#   tensorboard.sh NNS_BINARY
set -euo pipefail
NNS="$1"
cd "$(dirname "$0")/.."
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

sed "s|  data = synthetic(seed = 1)|  data = synthetic(seed = 1)\n  val_data = synthetic(seed = 7)\n  eval_every = 2|" examples/gpt.nns > "$tmp/g.nns"
"$NNS" run "$tmp/g.nns" --config tiny --steps 4 --metrics "$tmp/m.jsonl" --tensorboard "$tmp/tb" > "$tmp/run.log" 2>&1 || fail "run: $(tail -3 "$tmp/run.log")"
files=("$tmp"/tb/events.out.tfevents.*)
[ "${#files[@]}" = 1 ] && [ -f "${files[0]}" ] || fail "expected one event file in $tmp/tb: $(ls "$tmp/tb")"
out=$(python3 tests/data/read_tfevents.py "${files[0]}") || fail "the reader refused the file: $out"
[ "$(head -1 <<< "$out")" = "file_version brain.Event:2" ] || fail "the first event is not file_version: $(head -1 <<< "$out")"
for tag in train/loss train/lr train/grad_norm train/tokens_per_second train/peak_memory_bytes; do
  [ "$(grep -c " $tag " <<< "$out")" = 4 ] || fail "$tag: expected 4 scalars: $out"
done
[ "$(grep ' val/loss ' <<< "$out" | cut -d' ' -f1 | tr '\n' ' ')" = "2 4 " ] || fail "val/loss not at steps 2 and 4: $out"
printf '%s\n' "$out" > "$tmp/scalars.txt"
python3 - "$tmp/m.jsonl" "$tmp/scalars.txt" <<'PY' || fail "the event values differ from --metrics"
import json, struct, sys
want = {}
for r in map(json.loads, open(sys.argv[1])):
    for key, tag in (("loss", "train/loss"), ("lr", "train/lr"), ("grad_norm", "train/grad_norm"), ("val_loss", "val/loss")):
        if key in r:
            want[(r["step"], tag)] = struct.unpack("<f", struct.pack("<f", r[key]))[0]
got = {}
for line in open(sys.argv[2]).read().splitlines()[1:]:
    step, tag, value = line.split()
    got[(int(step), tag)] = float(value)
missing = [k for k in want if got.get(k) != want[k]]
if missing:
    sys.exit("differ: " + ", ".join(f"{k}: {got.get(k)} vs {want[k]}" for k in missing))
print(f"tensorboard: {len(got)} scalars read, CRCs checked, {len(want)} equal to --metrics as float32")
PY
# A flipped byte in a record's data: the CRC says so.
cp "${files[0]}" "$tmp/bad"
printf '\xff' | dd of="$tmp/bad" bs=1 seek=40 conv=notrunc 2> /dev/null
rc=0; err=$(python3 tests/data/read_tfevents.py "$tmp/bad" 2>&1 > /dev/null) || rc=$?
[ "$rc" = 1 ] && grep -q "CRC mismatch" <<< "$err" || fail "a corrupted file was read: exit $rc, $err"
echo PASS

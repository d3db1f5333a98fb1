#!/usr/bin/env bash
# A --data file whose token ids or targets fall outside the input's declared
# range (tokens(vocab)) is refused at load, exit 65, naming the file, the
# tensor, the first bad element and its value: on one device and on the
# ranks of a plan (it used to be found mid-step by the embedding, exit 70).
#   data_token_range.sh NNS_BINARY
set -uo pipefail
NNS="$1"
cd "$(dirname "$0")/../.."
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# gpt tiny's inputs ids, targets: [4, 32] i32 < 256; targets element 37 is 256.
python3 - "$tmp/data.safetensors" <<'PY'
import json, struct, sys
rows, seq = 4, 32
header, blob = {}, b""
for name in ("ids", "targets"):
    vals = [(7 * i) % 256 for i in range(rows * seq)]
    if name == "targets":
        vals[37] = 256
    b = struct.pack("<%di" % (rows * seq), *vals)
    header[name] = {"dtype": "I32", "shape": [rows, seq], "data_offsets": [len(blob), len(blob) + len(b)]}
    blob += b
h = json.dumps(header, separators=(",", ":")).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + blob)
PY
fail=0
for args in "" "--plan dp --gpus 2"; do
  out=$("$NNS" run examples/gpt.nns --config tiny --steps 1 --data "$tmp/data.safetensors" $args 2>&1); rc=$?
  if [ $rc != 65 ] || ! grep -q "data.safetensors: tensor 'targets': element 37 is 256, outside \[0, 256)" <<<"$out"; then
    echo "FAIL ($args): exit $rc, output:"; echo "$out" | tail -4; fail=1
  fi
done
[ $fail = 0 ] && echo PASS
exit $fail

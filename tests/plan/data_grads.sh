#!/usr/bin/env bash
# A partitioned run reads --data as one device does and --dump-grads writes
# the full gradients as one device does (gpt tiny on 2 ranks):
#   data_grads.sh data NNS   losses of dp (the batch split over the ranks),
#                            megatron (inputs replicated) and pipeline (4
#                            micro-batches a step) with a data file equal one
#                            device's with it (relative 1e-5), and differ from
#                            the synthetic data's
#   data_grads.sh grads NNS  step 1's gradients dumped by dp and megatron
#                            (with --data) hold the same tensors as one
#                            device's, each within ||a-b|| / ||b|| <= 1e-5;
#                            after --resume from step 2, the dump holds
#                            step 3's gradients, on one device and on dp
# Prints PASS last.
set -euo pipefail
MODE="$1"
NNS="$2"
cd "$(dirname "$0")/../.."
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# 12 micro-batches of gpt tiny's inputs (ids, targets: [4, 32] i32 < 256).
python3 - "$tmp/data.safetensors" <<'EOF'
import json, random, struct, sys
rows, seq, rng = 12 * 4, 32, random.Random(7)
header, blob = {}, b""
for name in ("ids", "targets"):
    b = struct.pack("<%di" % (rows * seq), *[rng.randrange(256) for _ in range(rows * seq)])
    header[name] = {"dtype": "I32", "shape": [rows, seq], "data_offsets": [len(blob), len(blob) + len(b)]}
    blob += b
h = json.dumps(header, separators=(",", ":")).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + blob)
EOF

losses() { sed -n 's/^step *\([0-9]*\)\/[0-9]*  loss \([0-9.]*\).*/\1 \2/p' "$1"; }
# same_losses A B: every step's loss within relative 1e-5.
same_losses() {
  paste <(losses "$1") <(losses "$2") | awk -v what="$2" '
    { d = $2 - $4; if (d < 0) d = -d; r = d / $2; if (r > worst) worst = r; n++ }
    END { printf "%s: %d steps, largest relative loss difference %.2e\n", what, n, worst; if (n != 3 || worst > 1e-5) exit 1 }'
}
run_one() { "$NNS" run examples/gpt.nns --steps 3 --data "$tmp/data.safetensors" "$@"; }
run_plan() { local plan="$1" config="$2"; shift 2; run_one --config "$config" --gpus 2 --plan "$plan" "$@"; }

if [ "$MODE" = data ]; then
  for config in tiny tiny_pipe; do
    run_one --config "$config" > "$tmp/one_$config.log"
    "$NNS" run examples/gpt.nns --config "$config" --steps 3 > "$tmp/synthetic_$config.log"
    if [ "$(losses "$tmp/one_$config.log")" = "$(losses "$tmp/synthetic_$config.log")" ]; then
      echo "the data file did not change the losses ($config)"; exit 1
    fi
  done
  for pc in dp:tiny megatron:tiny pipeline:tiny_pipe; do
    plan="${pc%%:*}" config="${pc##*:}"
    run_plan "$plan" "$config" > "$tmp/$plan.log"
    same_losses "$tmp/one_$config.log" "$tmp/$plan.log"
  done
elif [ "$MODE" = grads ]; then
  cat > "$tmp/compare.py" <<'EOF'
import json, math, struct, sys
def read(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    data = raw[8 + n:]
    out = {}
    for name, t in header.items():
        assert t["dtype"] == "F32", (path, name, t["dtype"])
        a, b = t["data_offsets"]
        out[name] = (t["shape"], struct.unpack("<%df" % ((b - a) // 4), data[a:b]))
    return meta, out
meta_one, one = read(sys.argv[1])
meta_plan, plan = read(sys.argv[2])
assert meta_one == meta_plan, (meta_one, meta_plan)
assert sorted(one) == sorted(plan), sorted(set(one) ^ set(plan))
# As --verify compares: relative to the tensor's norm floored at 1e-6 of the
# largest norm; a tensor below that floor does not affect the loss (gpt's
# key biases: softmax ignores them) and holds rounding noise only.
norms = {name: math.sqrt(sum(r * r for r in ref)) for name, (_, ref) in one.items()}
floor = 1e-6 * max(norms.values())
worst, worst_name, skipped = 0.0, "", 0
for name, (shape, ref) in one.items():
    pshape, got = plan[name]
    assert pshape == shape, (name, shape, pshape)
    if norms[name] <= floor:
        skipped += 1
        continue
    diff = math.sqrt(sum((g - r) ** 2 for g, r in zip(got, ref)))
    err = diff / max(norms[name], floor)
    if err > worst: worst, worst_name = err, name
print("%s: %d gradient tensors (%d loss-invariant left out), largest relative difference %.2e (%s)"
      % (sys.argv[3], len(one), skipped, worst, worst_name))
sys.exit(0 if worst <= 1e-5 else 1)
EOF
  run_one --config tiny --dump-grads "$tmp/one.safetensors" > "$tmp/one.log"
  for plan in dp megatron; do
    run_plan "$plan" tiny --dump-grads "$tmp/$plan.safetensors" > "$tmp/$plan.log"
    same_losses "$tmp/one.log" "$tmp/$plan.log"
    python3 "$tmp/compare.py" "$tmp/one.safetensors" "$tmp/$plan.safetensors" "$plan"
  done
  # --resume: the dump is of the run's first step, step 3 here.
  "$NNS" run examples/gpt.nns --config tiny --steps 3 --stop-after 2 --data "$tmp/data.safetensors" --save "$tmp/ck2.safetensors" > /dev/null
  run_one --config tiny --resume "$tmp/ck2.safetensors" --dump-grads "$tmp/resumed_one.safetensors" > "$tmp/resumed_one.log"
  run_plan dp tiny --resume "$tmp/ck2.safetensors" --dump-grads "$tmp/resumed_dp.safetensors" > "$tmp/resumed_dp.log"
  python3 "$tmp/compare.py" "$tmp/resumed_one.safetensors" "$tmp/resumed_dp.safetensors" "dp after --resume"
  python3 - "$tmp/resumed_one.safetensors" "$tmp/one.safetensors" <<'EOF'
import json, struct, sys
def meta(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]).get("__metadata__", {}), raw[8 + n:]
(resumed, rdata), (fresh, fdata) = meta(sys.argv[1]), meta(sys.argv[2])
print("resumed dump: step", resumed.get("step"), "; fresh dump: step", fresh.get("step"))
if resumed.get("step") != "3" or fresh.get("step") != "1": sys.exit("FAIL: the dumps' steps should be 3 (resumed) and 1")
if rdata == fdata: sys.exit("FAIL: step 3's gradients equal step 1's")
EOF
else
  echo "usage: data_grads.sh data|grads NNS"; exit 64
fi
echo "PASS"

#!/usr/bin/env bash
# Bad command lines end with a clear message and the right exit code (64
# usage, 65 bad input), never a crash, an internal error or a silent run.
#   cli_args.sh NNS_BINARY
set -uo pipefail
NNS="$1"
cd "$(dirname "$0")/.."
fail=0
expect() {  # EXIT MESSAGE ARGS...
  local want=$1 msg=$2
  shift 2
  local out rc
  out=$("$NNS" "$@" 2>&1); rc=$?
  if [ "$rc" != "$want" ] || ! grep -qF -- "$msg" <<<"$out"; then
    echo "FAIL: nns $*: exit $rc (want $want), output:"; echo "$out" | tail -3 | sed 's/^/    /'; fail=1
  fi
}
# Misspelt flags, configs and plans get the nearest name.
expect 64 "unknown option '--step' (did you mean '--steps'?)" run examples/01_mlp.nns --step 3
expect 64 "unknown option '--verfy' (did you mean '--verify'?)" run examples/01_mlp.nns --verfy
expect 64 "unknown config 'smal' (did you mean 'small'?)" check examples/01_mlp.nns --config smal
expect 64 "unknown plan 'megatorn' (did you mean 'megatron'?)" check examples/01_mlp.nns --plan megatorn --gpus 2
# An empty value is refused, whatever the flag (it used to be taken as unset).
expect 64 "--device needs a non-empty value" check examples/01_mlp.nns --device ""
expect 64 "--precision needs a non-empty value" check examples/01_mlp.nns --precision=
expect 64 "--save needs a non-empty value" run examples/01_mlp.nns --save ""
# Help per command: nns CMD --help and nns help CMD print that command alone
# (usage, options, an example) in under 40 lines.
for cmd in run check simulate plan repl; do
  for form in "$cmd --help" "help $cmd"; do
    out=$("$NNS" $form 2>&1); rc=$?
    lines=$(wc -l <<<"$out")
    if [ $rc != 0 ] || ! grep -q "^usage: nns $cmd" <<<"$out" || ! grep -q "^example:" <<<"$out" || [ "$lines" -ge 40 ] ||
       grep -q "^usage: nns" <<<"$(grep -v "^usage: nns $cmd" <<<"$out")"; then
      echo "FAIL: nns $form: exit $rc, $lines lines"; fail=1
    fi
  done
done
expect 64 "no help for unknown command 'bogus'" bogus --help
# nns --version names the build and the backends (the bf16 path among them).
expect 0 "bf16 products" --version
expect 0 "CPU kernels: oneDNN" --version
expect 64 "--gpus must be an integer from 1 to 65536" run examples/01_mlp.nns --gpus 99999999999999999999
expect 64 "--gpus must be an integer from 1 to 65536" run examples/01_mlp.nns --gpus 100000
expect 64 "--gpus must be an integer from 1 to 65536" run examples/01_mlp.nns --gpus 0
expect 64 "--seed must be a non-negative integer" run examples/01_mlp.nns --seed 99999999999999999999
expect 64 "--seed must be a non-negative integer" run examples/01_mlp.nns --seed " 5"
expect 64 "--steps must be a positive integer" run examples/01_mlp.nns --steps 3abc
expect 64 "--eval-budget must be a number of interpreter steps" check examples/01_mlp.nns --eval-budget -1
expect 64 "--eval-budget must be a number of interpreter steps" check examples/01_mlp.nns --eval-budget 1.5
expect 64 "--eval-timeout must be a number of seconds" check examples/01_mlp.nns --eval-timeout abc
expect 65 "cannot read file 'examples'" check examples
# Dimop brackets whose sizes multiply past 64 bits (signed overflows found by fuzz_dimop).
expect 65 "a*999999999999999999*999999999999999999 is past 64 bits" dimop '(a 999999999999999999 999999999999999999) -> a'
expect 65 "bracket (h e^) of output 0 dim 1: h*e is past 64 bits" dimop 'b h e -> b (h e)' --shapes '[1,1099511627776,1099511627776]'
expect 65 "cannot read file 'examples'" run examples
expect 64 "--save-every must be a positive number of steps" run examples/01_mlp.nns --save-every 0 --save x.safetensors
expect 64 "--save-every needs --save" run examples/01_mlp.nns --save-every 2
expect 64 "--stop-after must be a positive number of steps" run examples/01_mlp.nns --stop-after 0
# --check-timeout bounds the whole check (here plan evaluation and what
# follows take seconds), naming the stage that ran out; exit 70.
expect 70 "--check-timeout 1 ms ran out during plan evaluation" check examples/swin.nns --config swin_32gpu --plan coshard --gpus 128 --check-timeout 1
# (128 local ranks pass the local-rank cap only by its override; the check
# runs out long before any rank would start.)
NNS_MAX_LOCAL_RANKS=128 expect 70 "--check-timeout 1 ms ran out during" run examples/swin.nns --config swin_32gpu --plan coshard --gpus 128 --check-timeout 1
# A checkpoint whose step metadata is not a plain non-negative integer.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if "$NNS" run examples/01_mlp.nns --steps 1 --save "$tmp/ok.safetensors" >/dev/null 2>&1; then
  for bad in -3 3abc " 3" 1.5 03; do
    python3 - "$tmp/ok.safetensors" "$tmp/bad.safetensors" "$bad" <<'PY'
import json, struct, sys
d = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', d[:8])[0]
h = json.loads(d[8:8 + n])
h['__metadata__']['step'] = sys.argv[3]
hb = json.dumps(h, separators=(',', ':')).encode()
hb += b' ' * ((8 - len(hb) % 8) % 8)
open(sys.argv[2], 'wb').write(struct.pack('<Q', len(hb)) + hb + d[8 + n:])
PY
    expect 65 "metadata 'step' must be a non-negative integer (got '$bad')" run examples/01_mlp.nns --steps 2 --resume "$tmp/bad.safetensors"
  done
  # An extra (or empty-named) tensor: the file is not this model's.
  for extra in "" junk; do
    python3 - "$tmp/ok.safetensors" "$tmp/extra.safetensors" "$extra" <<'PY'
import json, struct, sys
d = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', d[:8])[0]
h = json.loads(d[8:8 + n])
end = len(d) - 8 - n
h[sys.argv[3]] = {"dtype": "F32", "shape": [0], "data_offsets": [end, end]}
hb = json.dumps(h, separators=(',', ':')).encode()
hb += b' ' * ((8 - len(hb) % 8) % 8)
open(sys.argv[2], 'wb').write(struct.pack('<Q', len(hb)) + hb + d[8 + n:])
PY
    expect 65 "tensor '$extra' is not a parameter or optimizer state of this model" run examples/01_mlp.nns --steps 2 --resume "$tmp/extra.safetensors"
  done
  # The same on the partitioned path (--resume with --plan).
  expect 65 "tensor 'junk' is not a parameter or optimizer state of this model" run examples/01_mlp.nns --steps 2 --gpus 2 --plan dp --resume "$tmp/extra.safetensors"
  # A gradients file is not weights.
  if "$NNS" run examples/01_mlp.nns --steps 1 --dump-grads "$tmp/g.safetensors" >/dev/null 2>&1; then
    expect 65 "a gradients file (written by --dump-grads), not weights" run examples/01_mlp.nns --steps 1 --init "$tmp/g.safetensors"
  else
    echo "FAIL: could not dump gradients"; fail=1
  fi
else
  echo "FAIL: could not save a checkpoint to corrupt"; fail=1
fi
# Data files: at least one micro-batch of every input, and nothing else.
python3 - "$tmp" <<'PY'
import json, struct, sys
def write(path, tensors):
    h, off, data = {}, 0, b''
    for name, (shape, n) in tensors.items():
        b = struct.pack('<%df' % n, *([0.5] * n))
        h[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(b)]}
        off += len(b); data += b
    hb = json.dumps(h, separators=(',', ':')).encode()
    hb += b' ' * ((8 - len(hb) % 8) % 8)
    open(path, 'wb').write(struct.pack('<Q', len(hb)) + hb + data)
write(sys.argv[1] + '/rows0.safetensors', {"x": ([0, 32], 0), "y": ([0, 32], 0)})
write(sys.argv[1] + '/more.safetensors', {"x": ([16, 32], 512), "y": ([16, 32], 512), "z": ([1], 1)})
PY
expect 65 "tensor 'x' has shape [0, 32]; expected [k*16, 32] (k >= 1 micro-batches" run examples/01_mlp.nns --steps 1 --data "$tmp/rows0.safetensors"
expect 65 "tensor 'z' is not an input of this model" run examples/01_mlp.nns --steps 1 --data "$tmp/more.safetensors"
expect 65 "tensor 'z' is not an input of this model" run examples/01_mlp.nns --steps 1 --gpus 2 --plan dp --data "$tmp/more.safetensors"
# check says when a file has no train block and no op.
printf 'let x = 3\n' > "$tmp/notrain.nns"
out=$("$NNS" check "$tmp/notrain.nns" 2>&1)
grep -q "train:         none (no train block" <<<"$out" && grep -q "the file defines no op" <<<"$out" || { echo "FAIL: check of a file without train block or ops:"; echo "$out"; fail=1; }
# splittable() answers exactly what trans() accepts.
cat > "$tmp/splittable.nns" <<'NNS'
model M() {
  param w: [8, 8] = normal(0.02)
  fn forward(x) { return linear(x, w) }
}
train {
  model = M()
  input x: [4, 8] = randn()
  loss = mse(model(x), x)
  optimizer = sgd(lr = 0.1)
}
plan p(ngpus) {
  let op = select("linear#0")[0]
  assert(splittable(op, "n"), "n splits")
  assert(splittable(op, "n", 2), "n splits in 2")
  assert(not splittable(op, "n", 3), "8 is not divisible by 3")
  assert(not splittable(op, "nope"), "no such dim")
  let parts = trans(op, dim = "n", num = 2)
  assert(not splittable(op, "n"), "split already")
  assert(splittable(parts[0], "n", 2), "a part splits further")
  assign(parts[0], 0)
  assert(not splittable(parts[0], "n"), "placed already")
  assign(parts[1], 1)
  replicate(unassigned(), 0..ngpus)
}
NNS
expect 0 "legal" check "$tmp/splittable.nns" --plan p --gpus 2
# --eval is forward passes: nothing to verify, dump or save.
expect 64 "--eval runs forward passes only; it does not take --verify" run tests/plan/plans/buffer.nns --eval --verify
expect 64 "it does not take --save" run tests/plan/plans/buffer.nns --eval --save x.safetensors
expect 64 "it does not take --dump-grads" run tests/plan/plans/buffer.nns --eval --dump-grads g.safetensors
expect 64 "it does not take --metrics" run tests/plan/plans/buffer.nns --eval --metrics m.jsonl
[ $fail = 0 ] && echo "cli_args: every bad command line refused with its message"
exit $fail

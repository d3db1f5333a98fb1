#!/usr/bin/env bash
# Token sources end to end (backend/runtime/data/), on examples/gpt.nns tiny
# with its data line replaced:
#   - a byte-tokenised corpus (scripts/make_token_corpus.py): the loss falls;
#   - the same tokens as a Megatron .bin/.idx (tests/data/write_mmidx.py, an
#     independent writer) give the same losses as the flat file;
#   - 6 steps unbroken = a 6-step run stopped after 3 (--stop-after), saved,
#     resumed for 3 more: losses bit-identical,
#     on one device and on the 2-rank dp plan (each rank reads its rows);
#   - bad files: one line naming the file and the fault, exit 65.
#   token_data.sh NNS_BINARY
set -euo pipefail
NNS="$1"
cd "$(dirname "$0")/../.."
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

python3 scripts/make_token_corpus.py docs/*.md -o "$tmp/corpus" > /dev/null
python3 tests/data/write_mmidx.py "$tmp/mm" --from-bin "$tmp/corpus/train.bin" --docs 7
model() { sed "s|data = synthetic(seed = 1)|data = $1|" examples/gpt.nns > "$2"; grep -q "data = $1" "$2"; }
model "token_file(\"$tmp/corpus/train.bin\", seed = 3)" "$tmp/flat.nns"
model "megatron_tokens(\"$tmp/mm\", seed = 3)" "$tmp/mm.nns"
losses() { sed -n 's/^step *\([0-9]*\)\/[0-9]*  loss \([0-9.]*\).*/\1 \2/p' "$1"; }

# The loss falls over 30 steps (from about ln 256 = 5.55). One batch's loss
# is noisy (the corpus is the docs, and a batch of tables or code scores
# far worse than prose), so the last five steps' mean is compared.
"$NNS" run "$tmp/flat.nns" --config tiny --steps 30 > "$tmp/train.log"
first=$(losses "$tmp/train.log" | head -1 | cut -d' ' -f2)
last=$(losses "$tmp/train.log" | tail -5 | awk '{ s += $2 } END { printf "%.6f", s / NR }')
awk -v a="$first" -v b="$last" 'BEGIN { printf "token file: loss %s -> %s (mean of the last 5 steps) over 30 steps\n", a, b; exit !(b < a - 1.0) }' ||
  { echo "FAIL: the loss did not fall by 1"; exit 1; }

# Megatron's layout of the same stream reads the same windows.
"$NNS" run "$tmp/mm.nns" --config tiny --steps 6 > "$tmp/mm.log"
"$NNS" run "$tmp/flat.nns" --config tiny --steps 6 --save "$tmp/full6.safetensors" > "$tmp/full.log"
[ "$(losses "$tmp/mm.log")" = "$(losses "$tmp/full.log")" ] || { echo "FAIL: megatron and flat losses differ"; paste <(losses "$tmp/mm.log") <(losses "$tmp/full.log"); exit 1; }

# Resume: 3 + 3 steps = 6 steps, on one device and on dp over 2 ranks.
"$NNS" run "$tmp/flat.nns" --config tiny --steps 6 --stop-after 3 --save "$tmp/ck.safetensors" > "$tmp/a.log"
"$NNS" run "$tmp/flat.nns" --config tiny --steps 6 --resume "$tmp/ck.safetensors" --save "$tmp/res6.safetensors" > "$tmp/b.log"
# Bit for bit: the weights, optimizer state and data position after step 6.
cmp "$tmp/full6.safetensors" "$tmp/res6.safetensors" || { echo "FAIL: the resumed run's step-6 checkpoint differs from the unbroken run's"; exit 1; }
[ "$(losses "$tmp/a.log"; losses "$tmp/b.log")" = "$(losses "$tmp/full.log")" ] ||
  { echo "FAIL: one device: 3 + resumed 3 differ from 6 unbroken"; paste <(losses "$tmp/a.log"; losses "$tmp/b.log") <(losses "$tmp/full.log"); exit 1; }
"$NNS" run "$tmp/flat.nns" --config tiny --plan dp --gpus 2 --steps 6 > "$tmp/dfull.log"
"$NNS" run "$tmp/flat.nns" --config tiny --plan dp --gpus 2 --steps 6 --stop-after 3 --save "$tmp/dck" > "$tmp/da.log"
"$NNS" run "$tmp/flat.nns" --config tiny --plan dp --gpus 2 --steps 6 --resume "$tmp/dck" > "$tmp/db.log"
[ "$(losses "$tmp/da.log"; losses "$tmp/db.log")" = "$(losses "$tmp/dfull.log")" ] ||
  { echo "FAIL: dp: 3 + resumed 3 differ from 6 unbroken"; paste <(losses "$tmp/da.log"; losses "$tmp/db.log") <(losses "$tmp/dfull.log"); exit 1; }
# dp splits each micro-batch's rows over the ranks: the same samples as one device.
# The ranks' losses are averaged in another order than one device sums them:
# equal within fp32 rounding (relative 1e-5), not bit for bit.
paste <(losses "$tmp/dfull.log") <(losses "$tmp/full.log") | awk '
  { d = $2 - $4; if (d < 0) d = -d; if (d / $4 > worst) worst = d / $4; n++ }
  END { printf "dp vs one device: %d steps, largest relative loss difference %.2e\n", n, worst; exit !(n == 6 && worst <= 1e-5) }' ||
  { echo "FAIL: dp and one device read different samples"; exit 1; }
echo "resume: 3 + 3 steps = 6 unbroken, bit-identical (one device and dp on 2 ranks)"

# A checkpoint of another data order is refused.
model "token_file(\"$tmp/corpus/train.bin\", seed = 4)" "$tmp/seed4.nns"
rc=0; "$NNS" run "$tmp/seed4.nns" --config tiny --steps 6 --resume "$tmp/ck.safetensors" > /dev/null 2> "$tmp/err" || rc=$?
[ "$rc" = 65 ] && grep -q "a resumed run must read the same data" "$tmp/err" || { echo "FAIL: resume with another seed: exit $rc"; cat "$tmp/err"; exit 1; }

# Bad files: exit 65 and a message naming the file and the fault.
bad() {  # bad DATA_EXPR EXPECTED_MESSAGE [RUN FLAGS...]
  local expr="$1" want="$2"; shift 2
  model "$expr" "$tmp/bad.nns"
  local rc=0; "$NNS" run "$tmp/bad.nns" --config tiny --steps 2 "$@" > /dev/null 2> "$tmp/err" || rc=$?
  [ "$rc" = 65 ] && grep -qF -- "$want" "$tmp/err" || { echo "FAIL: $expr: exit $rc, expected 65 and '$want'"; cat "$tmp/err"; exit 1; }
}
cp "$tmp/mm.bin" "$tmp/magic.bin"; { printf 'MMIDIDY\0\0'; tail -c +10 "$tmp/mm.idx"; } > "$tmp/magic.idx"
bad "megatron_tokens(\"$tmp/magic\")" "$tmp/magic.idx: wrong magic"
cp "$tmp/mm.bin" "$tmp/trunc.bin"; head -c 60 "$tmp/mm.idx" > "$tmp/trunc.idx"
bad "megatron_tokens(\"$tmp/trunc\")" "$tmp/trunc.idx: truncated index"
cp "$tmp/mm.idx" "$tmp/shortbin.idx"; head -c 1000 "$tmp/mm.bin" > "$tmp/shortbin.bin"
bad "megatron_tokens(\"$tmp/shortbin\")" "$tmp/shortbin.bin: sequence"
python3 -c "import struct,sys; open(sys.argv[1],'wb').write(struct.pack('<200H', *([7] * 100 + [300] + [7] * 99)))" "$tmp/vocab.bin"
bad "token_file(\"$tmp/vocab.bin\")" "$tmp/vocab.bin: token 300 at token offset 100 is outside the model's vocabulary [0, 256)"
bad "token_file(\"$tmp/vocab.bin\")" "$tmp/vocab.bin: token 300" --plan dp --gpus 2
head -c 40 "$tmp/vocab.bin" > "$tmp/short.bin"
bad "token_file(\"$tmp/short.bin\")" "$tmp/short.bin: 20 tokens, shorter than one window of seq + 1 = 33 tokens"
head -c 41 "$tmp/vocab.bin" > "$tmp/odd.bin"
bad "token_file(\"$tmp/odd.bin\")" "$tmp/odd.bin: 41 bytes is not a whole number of 16-bit tokens"
bad "token_file(\"$tmp/none.bin\")" "$tmp/none.bin: cannot open"
echo "bad files: 8 cases, exit 65 with the file named"
echo "PASS"

#!/usr/bin/env bash
# A training step of a plan stays in backend memory (nns run --stats). From
# step 2 on, rank 0 moves nothing host->device and reads back exactly its
# loss scalars, 4 bytes per loss-share instruction of its program (counted
# from `nns check --emit=program`, so a host round trip reintroduced
# anywhere in the executor fails this), and the CPU backend stages no
# collective through host copies. Step 1 uploads the synthetic inputs
# (counted: the counter is live); with --data not even step 1 uploads (the
# file went up whole when the run started).
# With NNS_TEST_HOST_STAGING=1 the CPU ranks take the path of CUDA ranks
# over Gloo: every collective's buffers go through host copies. Then the
# staged bytes of every step equal what rank 0's program's collectives move
# (in and out, by kind), the totals are those plus the loss scalars,
# --verify still passes, and the losses and norms equal a direct run's bit
# for bit (fp16 loss scaling and bf16 gradient reductions included).
#   host_traffic.sh NNS_BINARY
set -uo pipefail
NNS="$1"
cd "$(dirname "$0")/../.."
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail=0
first_uploads=0

# Rank 0's loss-share count and the bytes its collectives stage per step:
# "SHARES TO_HOST TO_DEVICE". Counts are elements per member block
# (allgather, reduce-scatter, all-to-all) or per buffer; groups of one
# rank communicate nothing; loss-allreduce sums host scalars.
program_expectations() {
  awk '
    /^program rank / { r = $3; next }
    r != "0" { next }
    {
      prim = $2; c = 0; g = ""
      for (i = 1; i <= NF; i++) { if ($i == "count") c = $(i + 1); if ($i == "ranks") g = $(i + 1) }
      if (prim == "loss-share") { shares++; next }
      if (prim == "send") { th += 4 * c; next }
      if (prim == "recv") { td += 4 * c; next }
      if (prim !~ /^(allreduce|allgather|reduce-scatter|all-to-all|bucket-allreduce|replica-average)$/) next
      n = split(g, members, ",")
      if (n < 2) next
      if (prim == "allgather") { th += 4 * c; td += 4 * n * c }
      else if (prim == "reduce-scatter") { th += 4 * n * c; td += 4 * c }
      else if (prim == "all-to-all") { th += 4 * n * c; td += 4 * n * c }
      else { th += 4 * c; td += 4 * c }
    }
    END { print shares + 0, th + 0, td + 0 }'
}

case_() {  # direct|staged|data FILE CONFIG PLAN GPUS PLAN_GPUS
  local mode=$1
  shift
  local args=("$1" --config "$2" --plan "$3" --gpus "$4" --plan-gpus "$5")
  if ! "$NNS" check "${args[@]}" --emit=program > "$tmp/program.txt" 2> "$tmp/err.txt"; then
    echo "FAIL: check --emit=program for $1 $3:"; tail -3 "$tmp/err.txt"; fail=1; return
  fi
  local shares st_host st_dev
  read -r shares st_host st_dev < <(program_expectations < "$tmp/program.txt")
  local run_env=() extra=()
  if [ "$mode" = staged ]; then
    run_env=(NNS_TEST_HOST_STAGING=1)
    extra=(--verify)
  elif [ "$mode" = data ]; then
    extra=(--data "$tmp/data.safetensors")
    st_host=0 st_dev=0
  else
    st_host=0 st_dev=0
  fi
  if ! env "${run_env[@]}" "$NNS" run "${args[@]}" --device cpu --steps 3 --stats "${extra[@]}" > "$tmp/run.txt" 2>&1; then
    echo "FAIL: $mode run of $1 $3:"; tail -3 "$tmp/run.txt"; fail=1; return
  fi
  if [ "$mode" = staged ] && ! grep -q "^verify: largest relative error .*: PASS" "$tmp/run.txt"; then
    echo "FAIL: $1 $3 with host staging: no verify PASS"; fail=1
  fi
  local lines
  lines=$(grep -c '^  stats (rank 0): ' "$tmp/run.txt")
  [ "$lines" = 3 ] || { echo "FAIL: $1 $3: $lines stats line(s) for 3 steps"; fail=1; return; }
  local step=0 h2d d2h sin sout before=$fail
  while read -r h2d d2h sin sout; do
    step=$((step + 1))
    if [ "$sin" != "$st_dev" ] || [ "$sout" != "$st_host" ]; then
      echo "FAIL: $1 $3 ($mode) step $step: staged $sin B in, $sout B out; want $st_dev B in, $st_host B out"; fail=1
    fi
    if [ "$d2h" != $((4 * shares + st_host)) ]; then
      echo "FAIL: $1 $3 ($mode) step $step: $d2h B device->host, want $((4 * shares + st_host)) ($shares loss scalar(s) + staging)"; fail=1
    fi
    if [ "$step" = 1 ] && [ "$mode" != data ]; then
      first_uploads=$((first_uploads + h2d - sin))
    elif [ "$h2d" != "$st_dev" ]; then
      echo "FAIL: $1 $3 ($mode) step $step: $h2d B host->device after the first step, want $st_dev (staging)"; fail=1
    fi
  done < <(sed -n 's/^  stats (rank 0): host->device \([0-9]*\) B, device->host \([0-9]*\) B; of these, collective staging \([0-9]*\) B host->device, \([0-9]*\) B device->host$/\1 \2 \3 \4/p' "$tmp/run.txt")
  [ "$fail" = "$before" ] &&
    echo "$1 $3 on $4 ranks ($mode): rank 0 reads $((4 * shares)) B of loss per step, stages $st_host B out and $st_dev B in"
}

for mode in direct staged; do
  case_ $mode examples/gpt.nns tiny megatron 2 2             # activation allreduces
  case_ $mode examples/gpt.nns tiny megatron 4 2             # plan replicas: replica averaging
  case_ $mode examples/gpt.nns tiny_pipe pipeline 2 2        # send/recv; the loss is on rank 1
  case_ $mode examples/gpt.nns tiny dp_zero1 4 4             # bucketed allreduce, zero1's reduce-scatter and allgather
  case_ $mode tests/plan/plans/collectives.nns small alltoall 4 4
done
case_ direct examples/01_mlp.nns small dp 2 2
case_ direct examples/gpt.nns tiny_pipe megatron 2 2         # micro-batches: one loss scalar each
case_ direct tests/plan/plans/pipeline.nns small onef1b 2 2
case_ direct tests/plan/plans/collectives.nns small allgather 2 2
# A data file is uploaded whole when the run starts: not even step 1
# uploads (12 micro-batches of gpt tiny's ids and targets, [4, 32] i32).
python3 - "$tmp/data.safetensors" <<'PY'
import json, random, struct, sys
rows, seq, rng = 12 * 4, 32, random.Random(3)
header, blob = {}, b""
for name in ("ids", "targets"):
    b = struct.pack("<%di" % (rows * seq), *[rng.randrange(256) for _ in range(rows * seq)])
    header[name] = {"dtype": "I32", "shape": [rows, seq], "data_offsets": [len(blob), len(blob) + len(b)]}
    blob += b
h = json.dumps(header, separators=(",", ":")).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + blob)
PY
case_ data examples/gpt.nns tiny megatron 2 2
case_ data examples/gpt.nns tiny_pipe pipeline 2 2
# Staging changes where the bytes are, never the numbers: staged and direct
# runs write the same losses and gradient norms, bit for bit, also with fp16
# loss scaling and bf16-rounded gradient reductions (which round the staged
# copy).
sed 's/^  clip = 1.0$/  clip = 1.0\n  precision = "fp16"\n  grad_reduce = "bf16"/' examples/gpt.nns > "$tmp/gpt_fp16.nns"
grep -q 'grad_reduce = "bf16"' "$tmp/gpt_fp16.nns" || { echo "FAIL: could not add fp16 settings to examples/gpt.nns"; fail=1; }
same_numbers() {  # FILE CONFIG PLAN GPUS
  local args=("$1" --config "$2" --plan "$3" --gpus "$4" --device cpu --steps 4)
  if ! "$NNS" run "${args[@]}" --metrics "$tmp/direct.jsonl" > "$tmp/d.txt" 2>&1 ||
     ! NNS_TEST_HOST_STAGING=1 "$NNS" run "${args[@]}" --metrics "$tmp/staged.jsonl" > "$tmp/s.txt" 2>&1; then
    echo "FAIL: $1 $3: a run failed:"; tail -2 "$tmp/d.txt" "$tmp/s.txt"; fail=1; return
  fi
  if ! diff <(sed 's/, "ms".*//' "$tmp/direct.jsonl") <(sed 's/, "ms".*//' "$tmp/staged.jsonl") > /dev/null; then
    echo "FAIL: $1 $3 on $4 ranks: staged collectives changed the losses or norms:"; diff "$tmp/direct.jsonl" "$tmp/staged.jsonl" | head -4; fail=1
  else
    echo "$1 $3 on $4 ranks: staged and direct runs agree bit for bit ($(wc -l < "$tmp/direct.jsonl") steps)"
  fi
}
same_numbers "$tmp/gpt_fp16.nns" tiny dp 2
same_numbers "$tmp/gpt_fp16.nns" tiny dp_zero1 4
same_numbers "$tmp/gpt_fp16.nns" tiny megatron 2
same_numbers examples/gpt.nns tiny_pipe pipeline 2
[ "$first_uploads" -gt 0 ] || { echo "FAIL: no run counted its first step's input uploads: the counter counts nothing"; fail=1; }
[ "$fail" = 0 ] && echo PASS
exit $fail

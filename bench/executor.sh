#!/usr/bin/env bash
# The plan executor's own cost at equal compute: a compute-bound model (gpt
# at a medium size) under a plan on 2 CPU ranks with 1 thread each, against
# the same model on one device with 2 threads (issue 31, item 5: 1.1x or
# less). A benchmark, not a test.
#   bench/executor.sh [--steps S] [--repeat R] [--plans "dp megatron"]
#
# The runs alternate (one device, then each plan, R rounds) so that a
# neighbour's load falls on all of them alike; each run's figure is its
# mean step time over the steps after the first ("done: ... ms/step"), and
# a row prints the median over the rounds, the range, and the ratio of the
# medians (plan / one device, the faster of its two rows).
#
# One device runs twice a round: as nns runs it (libgomp's threads spin
# while they wait: driver/openmp_env.cpp keeps spinning for one device
# alone) and with OMP_WAIT_POLICY=PASSIVE (waiting threads sleep, as on
# plan ranks). On a loaded machine the spinning pair loses its core to a
# neighbour and a step can take twice as long; the faster row is the
# baseline, so that the ratio does not flatter the plans.
#
# Columns:
#   local    the plan run's local work (copies, accumulation, zero-fills,
#            the optimizer: the trace's local track) as a share of its steps
#            after the first, mean over ranks, from one extra traced run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NNS="${NNS:-$ROOT/build/nns}"  # NNS=path compares another build
STEPS=6
REPEAT=3
PLANS="dp megatron"
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS="$2"; shift 2 ;;
    --repeat) REPEAT="$2"; shift 2 ;;
    --plans) PLANS="$2"; shift 2 ;;
    *) echo "executor.sh: unknown argument '$1'" >&2; exit 64 ;;
  esac
done
cd "$ROOT"
FILE=examples/gpt.nns
# gpt "medium": 4 layers of width 256 (8 heads), 1024 tokens per step, a
# vocabulary of 2048: its matmuls dominate a step on a CPU core.
MODEL=(--config tiny --set dim=256 --set heads=8 --set seq=128 --set batch=8 --set layers=4 --set vocab=2048)
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

ms_of() { sed -n 's/^done: .*, \([0-9.]*\) ms\/step.*/\1/p' <<<"$1"; }
# "median min max" of the numbers on stdin
stats() { sort -g | awk '{ a[NR] = $1 } END { m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2; print m, a[1], a[NR] }'; }

run_one() {  # NAME ARGS...: one run, its ms/step appended to $TMP/NAME
  local name="$1" out
  shift
  out="$("$NNS" run "$FILE" "${MODEL[@]}" --steps "$STEPS" "$@" 2>&1)" || {
    echo "executor.sh: $name failed: $(grep -m1 'error' <<<"$out")" >&2; exit 70; }
  ms_of "$out" >> "$TMP/$name"
}

cpu="$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
echo "executor cost: $FILE (gpt: dim 256, 8 heads, seq 128, batch 8, 4 layers, vocab 2048), $STEPS steps, $REPEAT rounds"
echo "CPU: $cpu, $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)"
for r in $(seq "$REPEAT"); do
  run_one one --threads 2
  OMP_WAIT_POLICY=PASSIVE run_one one_passive --threads 2
  for p in $PLANS; do run_one "$p" --plan "$p" --gpus 2 --threads 1; done
done
read -r spin_med spin_lo spin_hi <<<"$(stats < "$TMP/one")"
read -r pass_med pass_lo pass_hi <<<"$(stats < "$TMP/one_passive")"
one_med="$(awk -v a="$spin_med" -v b="$pass_med" 'BEGIN { print (a < b) ? a : b }')"
printf '%-30s %10s %17s %7s %7s\n' run "median ms" "range ms" ratio local
awk -v m="$spin_med" -v lo="$spin_lo" -v hi="$spin_hi" -v o="$one_med" \
  'BEGIN { printf "%-30s %10.1f %8.1f-%-8.1f %7.2f %7s\n", "one device, 2 threads", m, lo, hi, m / o, "-" }'
awk -v m="$pass_med" -v lo="$pass_lo" -v hi="$pass_hi" -v o="$one_med" \
  'BEGIN { printf "%-30s %10.1f %8.1f-%-8.1f %7.2f %7s\n", "one device, 2 threads, passive", m, lo, hi, m / o, "-" }'
for p in $PLANS; do
  read -r med lo hi <<<"$(stats < "$TMP/$p")"
  # local share from a traced run (tracing costs a clock read per instruction)
  "$NNS" run "$FILE" "${MODEL[@]}" --steps "$STEPS" --plan "$p" --gpus 2 --threads 1 --trace "$TMP/$p.json" > /dev/null 2>&1
  local_share="$(python3 - "$TMP/$p.json" <<'EOF'
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
shares = []
for r in sorted({e["pid"] for e in ev}):
    mine = [e for e in ev if e["pid"] == r]
    steps = sorted((e for e in mine if e["tid"] == 4), key=lambda e: e["ts"])[1:]
    for st in steps:
        b, end = st["ts"], st["ts"] + st["dur"]
        local = sum(min(e["ts"] + e["dur"], end) - max(e["ts"], b) for e in mine
                    if e["tid"] == 3 and e["ts"] < end and e["ts"] + e["dur"] > b)
        shares.append(local / st["dur"])
print("%.3f" % (sum(shares) / len(shares)))
EOF
)"
  awk -v n="$p, 2 ranks x 1 thread" -v m="$med" -v lo="$lo" -v hi="$hi" -v o="$one_med" -v l="$local_share" \
    'BEGIN { printf "%-30s %10.1f %8.1f-%-8.1f %7.2f %7s\n", n, m, lo, hi, m / o, l }'
done
echo "target (issue 31): ratio <= 1.10"

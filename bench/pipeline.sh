#!/usr/bin/env bash
# Pipeline schedules measured against their theory: the plans of
# tests/plan/plans/pipeline.nns (8 equal residual MLP blocks, config bench)
# on 2 CPU ranks, 1 thread each, m = 8 micro-batches. A benchmark, not a
# test.
#   bench/pipeline.sh [--steps S] [--config C] [--repeat R]
#
# --repeat R runs each plan R times and prints the run with the shortest
# median step: on a shared machine a rank that loses its core stretches
# the kernels it runs and the other rank waits for them, which reads as
# bubble; the least disturbed run is the closest to the schedule's own.
#
# Columns (per plan; "r0/r1" = rank 0 / rank 1):
#   bubble   measured, from the --trace JSON: per rank and step, the step's
#            time covered by neither compute (Forward/Backward kernels) nor
#            local work (copies, accumulation, optimizer: work that runs
#            in its task), i.e. waiting for the other rank and transfers;
#            mean over ranks and over the steps after the first.
#   local    the share of a step in local work (the trace's local track:
#            copies, accumulation, zero-fills, the optimizer, input
#            loading), mean over ranks and over the steps after the first.
#            Issue 31's target: at most 0.10.
#   1-busy   1 - the trace summary's compute share of the last step, mean
#            over ranks (counts local work as bubble: an upper bound).
#   theory   semantics/pipeline_schedule.h's unit-time bubble (F = 1,
#            unsplit B = 2, split B = W = 1; idle slots / (p * makespan)):
#            gpipe, 1f1b (p-1)/(m+p-1); interleaved (p-1)/(v*m+p-1);
#            zb-h1 (p-1)/(3m+p-1); sequential (no schedule: one rank works
#            at a time) (p-1)/p.
#   excess   bubble - theory (issue 31's target: at most 0.05 for GPipe and
#            1F1B; ZB-H1's bubble below 1F1B's).
#   step ms  median step time of the steps after the first (the run's
#            "step i/N ... X ms" lines); vs seq = step / sequential's.
#            1F1B's theory: (m+p-1)/(p*m) = (m+1)/(2m) = 0.56 for p = 2.
#   stash    peak micro-batches in flight per rank, measured from the trace:
#            micro-batch k is held on a rank from the start of its first
#            Forward there to the end of its last event there (backward,
#            gradient accumulation); peak of the overlap. Theory: GPipe m,
#            1F1B p-s on stage s, ZB-H1 min(p, m) (W delayed on s > 0),
#            interleaved (v = 2, Megatron's table) 5/3 chunk-micro-batches
#            on ranks 0/1 (peak_stashed), sequential 1.
#   peak MiB rank 0's "peak piece memory" (weights, gradients, activations).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NNS="${NNS:-$ROOT/build/nns}"  # NNS=path compares another build
STEPS=6
CONFIG=bench
REPEAT=1
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS="$2"; shift 2 ;;
    --config) CONFIG="$2"; shift 2 ;;
    --repeat) REPEAT="$2"; shift 2 ;;
    *) echo "pipeline.sh: unknown argument '$1'" >&2; exit 64 ;;
  esac
done
cd "$ROOT"
FILE=tests/plan/plans/pipeline.nns
P=2
M=8
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

# trace JSON -> "bubble local stash_r0/stash_r1"
analyse() {
  python3 - "$1" <<'EOF'
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
ranks = sorted({e["pid"] for e in ev})
bubbles, locals_, stash = [], [], []
for r in ranks:
    mine = [e for e in ev if e["pid"] == r]
    steps = sorted((e for e in mine if e["tid"] == 4), key=lambda e: e["ts"])
    for st in steps[1:]:
        b, end = st["ts"], st["ts"] + st["dur"]
        iv = sorted((max(e["ts"], b), min(e["ts"] + e["dur"], end)) for e in mine
                    if e["tid"] in (1, 3) and e["ts"] < end and e["ts"] + e["dur"] > b)
        covered, cur_s, cur_e = 0.0, None, None
        for s, t in iv:
            if cur_e is None or s > cur_e:
                if cur_e is not None: covered += cur_e - cur_s
                cur_s, cur_e = s, t
            else:
                cur_e = max(cur_e, t)
        if cur_e is not None: covered += cur_e - cur_s
        bubbles.append(1 - covered / st["dur"])
        # one rank runs one instruction at a time: local events never overlap
        local = sum(min(e["ts"] + e["dur"], end) - max(e["ts"], b) for e in mine
                    if e["tid"] == 3 and e["ts"] < end and e["ts"] + e["dur"] > b)
        locals_.append(local / st["dur"])
    # micro-batches in flight, over the last step
    last = steps[-1]["args"]["step"]
    first, lastend = {}, {}
    for e in mine:
        mb = e.get("args", {}).get("mb")
        if e["tid"] not in (1, 3) or mb is None or e["args"].get("step") != last: continue
        if e["tid"] == 1 and " F mb" in e["name"]:
            first[mb] = min(first.get(mb, e["ts"]), e["ts"])
        lastend[mb] = max(lastend.get(mb, 0), e["ts"] + e["dur"])
    pts = sorted([(first[k], 1) for k in first] + [(lastend[k], -1) for k in first], key=lambda x: (x[0], x[1]))
    live = peak = 0
    for _, d in pts:
        live += d
        peak = max(peak, live)
    stash.append(str(peak))
print("%.3f %.3f %s" % (sum(bubbles) / len(bubbles), sum(locals_) / len(locals_), "/".join(stash)))
EOF
}

echo "pipeline schedules: $FILE --config $CONFIG, $P CPU ranks x 1 thread, m = $M micro-batches, $STEPS steps, best of $REPEAT ($(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg))"
printf '%-12s %7s %7s %7s %7s %7s %9s %7s %9s %12s %9s\n' plan bubble theory excess local 1-busy "step ms" "vs seq" stash "stash theory" "peak MiB"
seq_ms=""
for entry in "sequential 1/2 1/1" "gpipe 1/9 8/8" "onef1b 1/9 2/1" "interleaved 1/17 5/3(chunks)" "zbh1 1/25 2/2"; do
  read -r plan theory stheory <<<"$entry"
  out="" ms=""
  for r in $(seq "$REPEAT"); do
    o="$("$NNS" run "$FILE" --config "$CONFIG" --plan "$plan" --gpus "$P" --threads 1 --steps "$STEPS" --trace "$TMP/try.json" 2>&1)" || {
      out="FAILED $o"; break; }
    m="$(sed -n 's|^step *\([0-9]*\)/[0-9]* .* \([0-9.]*\) ms .*|\1 \2|p' <<<"$o" | awk '$1 > 1 { print $2 }' | sort -g |
         awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }')"
    if [ -z "$ms" ] || awk -v a="$m" -v b="$ms" 'BEGIN { exit !(a < b) }'; then
      out="$o" ms="$m"
      mv "$TMP/try.json" "$TMP/$plan.json"
    fi
  done
  if [[ $out == FAILED* ]]; then
    printf '%-12s failed: %s\n' "$plan" "$(grep -m1 'error:' <<<"$out")"; continue
  fi
  busy="$(sed -n 's/^trace: rank [0-9]* busy \([0-9.]*\)%.*/\1/p' <<<"$out" | awk '{ s += $1; n++ } END { printf "%.3f", 1 - s / n / 100 }')"
  peak="$(sed -n 's/^done: .*peak piece memory \([0-9.]*\) \([KMG]\)iB.*/\1 \2/p' <<<"$out" | awk '{ f = $2 == "K" ? 1 / 1024 : $2 == "G" ? 1024 : 1; printf "%.1f", $1 * f }')"
  read -r bubble local stash <<<"$(analyse "$TMP/$plan.json")"
  [ "$plan" = sequential ] && seq_ms="$ms"
  awk -v p="$plan" -v b="$bubble" -v l="$local" -v u="$busy" -v th="$theory" -v ms="$ms" -v s="$seq_ms" -v st="$stash" -v sth="$stheory" -v pk="$peak" \
    'BEGIN { split(th, f, "/"); t = f[1] / f[2]
             printf "%-12s %7.3f %7.3f %+7.3f %7.3f %7.3f %9.1f %7.2f %9s %12s %9s\n", p, b, t, b - t, l, u, ms, ms / s, st, sth, pk }'
done
echo "1F1B vs sequential theory: (m+1)/(2m) = $(awk -v m=$M 'BEGIN { printf "%.2f", (m + 1) / (2 * m) }') (target <= 0.65)"

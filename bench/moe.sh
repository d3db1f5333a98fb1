#!/usr/bin/env bash
# Sparse mixture of experts against its dense variant at equal shapes: the
# step time of examples/moe.nns with top-2 of 8 experts (config
# bench_sparse: each expert runs on its at most C slots per sequence) and
# with every expert on every token (bench_dense: the same model, parameters
# and routing, dense_experts = true, no capacity), one CPU rank, 1 thread.
# A benchmark, not a test.
#   bench/moe.sh [--steps S] [--rounds R]
#
# Shapes (examples/moe.nns, bench_sparse): 1 block, dim 256, 4 heads, SwiGLU
# experts of FFN 2048 (8x dim, so that the experts are most of the step),
# 8 experts top-2, capacity factor 1.0, 8 sequences of 128 tokens (routing
# groups), vocabulary 256. The experts' multiply-adds, sparse over dense,
# are top_k * capacity_factor / experts = 0.25 (every slot computed, filled
# or not); the rest of the step (attention, router, dispatch/combine, the
# optimizer) is the same in both and keeps the measured ratio above that.
#
# Columns: step ms = median step time of the steps after the first, over
# R rounds run alternately (sparse, dense, sparse, ...) so that a change in
# the machine's load reaches both; experts = the share of that step spent in
# moe_experts (forward and backward kernels, from the --trace of the last
# round). Target: sparse <= 0.4 x dense.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NNS="${NNS:-$ROOT/build/nns}"  # NNS=path measures another build
STEPS=6
ROUNDS=2
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    *) echo "moe.sh: unknown argument '$1'" >&2; exit 64 ;;
  esac
done
[ "$STEPS" -ge 2 ] || { echo "moe.sh: --steps must be at least 2 (the first step is left out)" >&2; exit 64; }
cd "$ROOT"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

# Share of the traced steps after the first spent in moe_experts kernels.
expert_share() {
  python3 - "$1" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
ev = t["traceEvents"] if isinstance(t, dict) else t
steps = sorted((e for e in ev if e.get("ph") == "X" and e["name"].startswith("step ")), key=lambda e: e["ts"])[1:]
if not steps:
    sys.exit("moe.sh: the trace has no step after the first")
total = sum(s["dur"] for s in steps)
inside = lambda e: any(s["ts"] <= e["ts"] <= s["ts"] + s["dur"] for s in steps)
experts = sum(e["dur"] for e in ev if e.get("ph") == "X" and "moe_experts" in e["name"] and inside(e))
print(f"{experts / total:.2f}")
PY
}

for r in $(seq 1 "$ROUNDS"); do
  for c in bench_sparse bench_dense; do
    "$NNS" run examples/moe.nns --config "$c" --steps "$STEPS" --threads 1 --trace "$TMP/$c.json" >"$TMP/$c.$r.out" 2>&1 ||
      { cat "$TMP/$c.$r.out" >&2; exit 70; }
    sed -n 's|^step *\([0-9]*\)/[0-9]* .* \([0-9.]*\) ms .*|\1 \2|p' "$TMP/$c.$r.out" | awk '$1 > 1 { print $2 }' >>"$TMP/$c.ms"
  done
done
median() { sort -g "$1" | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
sparse="$(median "$TMP/bench_sparse.ms")"
dense="$(median "$TMP/bench_dense.ms")"
printf "%-13s %9s %8s\n" config "step ms" experts
printf "%-13s %9.2f %8s\n" bench_sparse "$sparse" "$(expert_share "$TMP/bench_sparse.json")"
printf "%-13s %9.2f %8s\n" bench_dense "$dense" "$(expert_share "$TMP/bench_dense.json")"
awk -v s="$sparse" -v d="$dense" 'BEGIN { r = s / d; printf "sparse / dense = %.3f (target <= 0.4: %s)\n", r, r <= 0.4 ? "met" : "NOT met" }'

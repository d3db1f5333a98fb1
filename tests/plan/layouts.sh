#!/usr/bin/env bash
# The collectives derived for the plans of tests/plan/plans/layouts.nns
# (their runs under --verify are plan_layouts_* in tests/CMakeLists.txt):
# - interleaved: gelu's parts in the order 0,2,1,3 read linear#0's partial
#   sums through a single reduce-scatter; in the natural order (plan
#   natural) the same edge takes more than one collective;
# - disjoint: partial sums on {0,1} read replicated on {2,3} cross the
#   boundary once (reduce-scatter, send each half, allgather);
# - every plan's communication derives (check --emit=comm exits 0 with no
#   edge left underived).
#   layouts.sh NNS_BINARY
set -uo pipefail
NNS="$1"
cd "$(dirname "$0")/../.."
fail=0
comm() {  # PLAN GPUS
  "$NNS" check tests/plan/plans/layouts.nns --config small --plan "$1" --gpus "$2" --emit=comm
}
# The steps of one edge: the lines after its header up to the next edge.
edge() {  # TEXT HEADER
  awk -v h="$2" 'index($0, h) { on = 1; next } on && /^  (forward|backward|total)/ { exit } on && !/=>/ { print }' <<<"$1"
}
for p in interleaved:4 natural:4 grow_shrink:4 disjoint:4 replicated_split:8; do
  out="$(comm "${p%:*}" "${p#*:}")"
  rc=$?
  if [ $rc != 0 ]; then echo "FAIL: plan ${p%:*}: check --emit=comm exit $rc"; fail=1; fi
  if grep -q "cannot\|not supported\|irregular" <<<"$out"; then echo "FAIL: plan ${p%:*}: an edge is not derived"; fail=1; fi
done
inter="$(edge "$(comm interleaved 4)" "forward %4 ")"
if [ "$inter" != "    reduce-scatter dim 0 groups {0,2} {1,3} bytes 2048" ]; then
  echo "FAIL: interleaved: linear#0 -> gelu#0 is not one reduce-scatter:"; echo "$inter"; fail=1
fi
nat="$(edge "$(comm natural 4)" "forward %4 ")"
if [ "$(grep -c . <<<"$nat")" -lt 2 ]; then echo "FAIL: natural: expected more than one step for linear#0 -> gelu#0:"; echo "$nat"; fail=1; fi
dis="$(edge "$(comm disjoint 4)" "forward %4 ")"
want=$'    reduce-scatter dim 0 groups {0,1} bytes 2048\n    send/recv pairs {0->2} {1->3} bytes 2048 (2048 across groups)\n    allgather dim 0 groups {2,3} bytes 2048'
if [ "$dis" != "$want" ]; then echo "FAIL: disjoint: linear#0 -> gelu#0 is not reduce-scatter, send, allgather:"; echo "$dis"; fail=1; fi
[ $fail = 0 ] && echo "layouts: one reduce-scatter for the interleaved order; each byte crosses once between disjoint groups"
exit $fail

#!/usr/bin/env bash
# The evaluation budget counts interpreter steps, so a file gets the same
# verdict on a quiet machine and on a loaded one: an evaluation just inside
# the budget passes and one past it fails at the same place with the same
# message, with every core kept busy by a bounded busy loop beside it
# (issue 24: the SC'21 145.6B row once failed its 60 s wall-clock budget
# only because the machine was busy).
set -uo pipefail
NNS=${1:?usage: eval_budget_load.sh NNS_BINARY}
tmp=$(mktemp -d)
busy=()
cleanup() { for p in "${busy[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
# 30,000 iterations of a loop whose body calls a function: about 60,000
# steps, inside a budget of 100,000; 300,000 iterations are past it.
for n in 30000 300000; do
  cat > "$tmp/loop$n.nns" <<NNS
fn bump(x) { return x + 1 }
let total = 0
for i in 0..$n {
  total = bump(total)
}
NNS
done
verdicts() {  # prints "rc output" of both files under --eval-budget 100000
  for n in 30000 300000; do
    out=$("$NNS" check "$tmp/loop$n.nns" --eval-budget 100000 2>&1)
    echo "$n rc=$? $(echo "$out" | head -1)"
  done
}
quiet=$(verdicts)
echo "quiet:"; echo "$quiet"
grep -q "^30000 rc=0" <<<"$quiet" || fail "the evaluation inside the budget failed on a quiet machine"
grep -q "^300000 rc=65 .*evaluation ran past its budget of 100000 steps" <<<"$quiet" || fail "the evaluation past the budget did not fail"
# Every core busy (bounded: 120 s at most, killed on exit), then the same files.
cores=$(nproc)
for _ in $(seq "$cores"); do timeout 120 sh -c 'while :; do :; done' & busy+=($!); done
loaded=$(verdicts)
echo "loaded ($cores busy loops):"; echo "$loaded"
[ "$quiet" = "$loaded" ] || fail "the verdicts differ under load"
echo "ok: the same verdicts quiet and under load"

# Sourced by tests/plan/recompute.sh and regather.sh (their argument, the
# nns binary, becomes NNS; the caller sets FILE after): runs from the
# source root, `fail` starts at 0 and any failed check sets it to 1.
#   expect_eq WHAT ACTUAL EXPECTED
#   verify_runs "PLAN GPUS" ...   each `nns run FILE --plan PLAN --gpus GPUS --verify` passes
#   rank0 PLAN                    rank 0's program of PLAN on 2 devices (stderr dropped)
NNS="$1"
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
fail=0

expect_eq() {
  if [ "$2" != "$3" ]; then
    echo "FAIL: $1: got '$2', expected '$3'"
    fail=1
  fi
}

verify_runs() {
  local run out
  for run in "$@"; do
    set -- $run
    if ! out=$("$NNS" run "$FILE" --plan "$1" --gpus "$2" --verify 2>&1) || ! grep -q 'verify: largest relative error .*: PASS' <<<"$out"; then
      echo "FAIL: run --plan $1 --gpus $2 --verify:"
      tail -5 <<<"$out"
      fail=1
    fi
  done
}

rank0() {  # (its warnings are the tests' to read, not the log's)
  "$NNS" check "$FILE" --plan "$1" --gpus 2 --emit=program 2>/dev/null | awk '/^program rank 0 /{on=1} /^program rank 1 /{on=0} on'
}

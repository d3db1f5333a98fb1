#!/usr/bin/env bash
# Runs the checker's .nns cases. usage: run_checker_tests.sh NNS_BINARY
# Each tests/checker/cases/*.nns states, inline:
#   # args: --plan P --gpus N [...]   arguments after `nns check FILE`
#   # exit: N                         expected exit code (default 65)
#   # error: L:C: message             the error, exactly (one per file at most)
#   # note: L:C: message              each note, exactly, in order
#   # expect: check: ...              the verdict line on stdout, without
#                                     the trailing " (12 ms)"
#   # expect-prefix: check: ...       the verdict line starts with this (for
#                                     time limits, whose wording may vary)
# The printed errors and notes must be exactly those listed.
set -u
nns=$1
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.." || exit 1
export NO_COLOR=1
fail=0
count=0
for f in tests/checker/cases/*.nns; do
  count=$((count + 1))
  args=$(grep -m1 '^# args: ' "$f" | sed 's/^# args: //')
  want_exit=$(grep -m1 '^# exit: ' "$f" | awk '{print $3}')
  [ -z "$want_exit" ] && want_exit=65
  # shellcheck disable=SC2086
  out=$("$nns" check "$f" $args 2>/tmp/nns_checker_err.$$); rc=$?
  err=$(cat /tmp/nns_checker_err.$$); rm -f /tmp/nns_checker_err.$$
  bad=0
  if [ "$rc" != "$want_exit" ]; then echo "FAIL $f: exit $rc, expected $want_exit"; bad=1; fi
  # Expected diagnostics, in order, as "file:L:C: kind: message".
  want=$(grep -E '^# (error|note): ' "$f" | sed -E "s|^# (error\|note): ([0-9]+:[0-9]+): (.*)$|$f:\2: \1: \3|")
  got=$(grep -E "^$f:[0-9]+:[0-9]+: (error|note): |^nns: (error|note): " <<<"$err")
  if [ "$want" != "$got" ]; then
    echo "FAIL $f: diagnostics differ"; diff <(echo "$want") <(echo "$got") | sed 's/^/    /'; bad=1
  fi
  if [ -n "$got" ] && ! grep -q '^ *\^' <<<"$err"; then echo "FAIL $f: no caret line"; bad=1; fi
  want_v=$(grep -E '^# expect: ' "$f" | sed 's/^# expect: //')
  got_v=$(grep -E '^check: ' <<<"$out" | sed -E 's/ \([0-9.]+ ms\)$//')
  prefix=$(grep -m1 -E '^# expect-prefix: ' "$f" | sed 's/^# expect-prefix: //')
  if [ -n "$prefix" ]; then
    [ "${got_v#"$prefix"}" != "$got_v" ] && got_v=$prefix
    want_v=$prefix
  fi
  if [ "$want_v" != "$got_v" ]; then
    echo "FAIL $f: verdict differs"; diff <(echo "$want_v") <(echo "$got_v") | sed 's/^/    /'; bad=1
  fi
  if [ $bad = 1 ]; then
    fail=$((fail + 1)); echo "$out" | sed 's/^/    out: /'; echo "$err" | sed 's/^/    err: /'
  fi
done
echo "checker cases: $((count - fail))/$count passed"
[ $count -gt 0 ] && [ $fail = 0 ]

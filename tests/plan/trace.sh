#!/usr/bin/env bash
# nns run --trace: a pipeline run on 2 ranks writes one Chrome trace (valid
# JSON, a row per rank with compute, send/recv and step events, the per-rank
# parts removed) and prints each rank's busy/idle line; a single-device run
# traces too; --trace without a value is a usage error (exit 64).
#   trace.sh NNS_BINARY
set -uo pipefail
NNS="$1"
cd "$(dirname "$0")/../.."
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

# Valid JSON: python3's parser where there is one, else a structural check
# of the writer's layout: the envelope, then one event object per line made
# of strings, numbers and nested objects only.
valid_json() {
  if command -v python3 > /dev/null; then
    python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$1"
  else
    head -1 "$1" | grep -q '^{"displayTimeUnit":"ms",' && sed -n 2p "$1" | grep -q '^"traceEvents":\[$' &&
      [ "$(tail -1 "$1")" = "]}" ] &&
      sed '1,2d;$d' "$1" | awk '
        !/^\{"ph":"[MX]",/ { exit 1 }
        {  # strings -> S, numbers -> N, then objects {S:x,...} -> V until one V is left
          line = $0; sub(/,$/, "", line); gsub(/\\./, "", line); gsub(/"[^"]*"/, "S", line)
          gsub(/-?[0-9][0-9.eE+-]*/, "N", line)
          while (gsub(/\{S:[SNV](,S:[SNV])*\}/, "V", line)) {}
          if (line != "V") exit 1
        }'
  fi
}

# count FILE REGEX: event lines matching REGEX.
count() { grep -c -E "$2" "$1"; }

out="$tmp/t.json"
if ! "$NNS" run examples/01_mlp.nns --plan pipeline --gpus 2 --steps 2 --trace "$out" > "$tmp/run.txt" 2>&1; then
  bad "pipeline run with --trace:"; tail -5 "$tmp/run.txt"
fi
if [ -f "$out" ]; then
  valid_json "$out" || bad "$out is not valid JSON"
  for r in 0 1; do
    grep -q "\"pid\":$r,\"name\":\"process_name\",\"args\":{\"name\":\"rank $r (device $r)\"}" "$out" || bad "no row named 'rank $r (device $r)'"
    [ "$(count "$out" "\"ph\":\"X\",\"pid\":$r,")" -gt 0 ] || bad "no events of rank $r"
    [ "$(count "$out" "\"pid\":$r,\"tid\":1,.*\"name\":\"[^\"]* F mb[0-9]+\",\"cat\":\"compute\"")" -gt 0 ] || bad "rank $r: no forward compute event"
    [ "$(count "$out" "\"pid\":$r,\"tid\":1,.*\"name\":\"[^\"]* B mb[0-9]+\",\"cat\":\"compute\"")" -gt 0 ] || bad "rank $r: no backward compute event"
    [ "$(count "$out" "\"pid\":$r,\"tid\":4,.*\"name\":\"step [12]\"")" -eq 2 ] || bad "rank $r: not one step event per step"
    [ "$(count "$out" "\"pid\":$r,.*\"name\":\"Update ")" -gt 0 ] || bad "rank $r: no update event"
    grep -q "trace: rank $r busy [0-9.]*% (compute), idle [0-9.]*% of the last step" "$tmp/run.txt" || bad "no busy/idle line for rank $r"
  done
  [ "$(count "$out" '"pid":0,.*"name":"Send [^"]* to rank 1 tag ')" -gt 0 ] || bad "no send event on rank 0"
  [ "$(count "$out" '"pid":1,.*"name":"Recv [^"]* from rank 0 tag ')" -gt 0 ] || bad "no recv event on rank 1"
  grep -q '"pid":2,' "$out" && bad "events of a third rank"
else
  bad "$out was not written"
fi
ls "$out".rank-* > /dev/null 2>&1 && bad "per-rank parts left behind: $(ls "$out".rank-*)"

# One device, no plan: the single-device trainer's nodes.
one="$tmp/one.json"
if "$NNS" run examples/01_mlp.nns --steps 1 --trace "$one" > "$tmp/one.txt" 2>&1 && [ -f "$one" ]; then
  valid_json "$one" || bad "$one is not valid JSON"
  grep -q '"name":"linear#0 F mb0","cat":"compute"' "$one" || bad "single device: no 'linear#0 F mb0' event"
  grep -q "trace: rank 0 busy" "$tmp/one.txt" || bad "single device: no busy/idle line"
else
  bad "single-device run with --trace:"; tail -3 "$tmp/one.txt"
fi

# NNS_TRACE_EVERY_INSTRUCTION=1: each bookkeeping instruction its own event
# (what nns profile's calibration reads), none merged into "local work".
every="$tmp/every.json"
if NNS_TRACE_EVERY_INSTRUCTION=1 "$NNS" run examples/01_mlp.nns --config small --plan megatron --gpus 2 --steps 2 --trace "$every" > "$tmp/every.txt" 2>&1; then
  valid_json "$every" || bad "$every is not valid JSON"
  grep -q '"name":"slice-in mb0","cat":"local"' "$every" || bad "every instruction: no 'slice-in mb0' event"
  grep -q '"name":"collect-out mb0","cat":"local"' "$every" || bad "every instruction: no 'collect-out mb0' event"
  grep -q '"name":"local work' "$every" && bad "every instruction: merged 'local work' events remain"
else
  bad "run with NNS_TRACE_EVERY_INSTRUCTION=1:"; tail -3 "$tmp/every.txt"
fi

# A zero-bubble schedule's weight-gradient tasks (BackwardW) are compute
# ("... W mbK"), not local work: with every instruction traced, no
# "backward-w" event is left on the local track.
zb="$tmp/zb.json"
if NNS_TRACE_EVERY_INSTRUCTION=1 "$NNS" run tests/plan/plans/pipeline.nns --config small --plan zbh1 --gpus 2 --steps 2 --trace "$zb" > "$tmp/zb.txt" 2>&1; then
  [ "$(count "$zb" '"tid":1,.*"name":"[^"]* W mb[0-9]+","cat":"compute"')" -gt 0 ] || bad "zbh1: no weight-gradient (W) compute event"
  [ "$(count "$zb" '"name":"backward-w')" -eq 0 ] || bad "zbh1: backward-w traced as local work"
else
  bad "zbh1 run with --trace:"; tail -3 "$tmp/zb.txt"
fi

# Data parallel: the gradient bucket's allreduce is posted and completed at
# its first consumer; that wait is a comm event of its own, not part of the
# consumer's (local) add-to.
dpt="$tmp/dp.json"
if NNS_TRACE_EVERY_INSTRUCTION=1 "$NNS" run examples/01_mlp.nns --config small --plan dp --gpus 2 --steps 2 --trace "$dpt" > "$tmp/dp.txt" 2>&1; then
  [ "$(count "$dpt" '"tid":2,.*"name":"Wait for posted collective[^"]*","cat":"comm"')" -gt 0 ] || bad "dp: no 'Wait for posted collective' comm event"
else
  bad "dp run with --trace:"; tail -3 "$tmp/dp.txt"
fi

# Usage errors: no value, an option where the value should be, check.
for args in "--trace" "--trace=" "--trace --steps 1"; do
  # shellcheck disable=SC2086
  "$NNS" run examples/01_mlp.nns $args > "$tmp/u.txt" 2>&1
  rc=$?
  [ $rc -eq 64 ] || bad "run $args: exit $rc, expected 64"
  grep -q "needs a" "$tmp/u.txt" || bad "run $args: no usage message"
done
"$NNS" check examples/01_mlp.nns --trace "$tmp/c.json" > /dev/null 2>&1
[ $? -eq 64 ] || bad "check --trace: expected exit 64"

[ $fail -eq 0 ] && echo PASS
exit $fail

#!/usr/bin/env bash
# Fault tests: what a run does when a rank dies or a save is cut short.
#   faults.sh rank-killed NNS_BINARY
#     kill -9 of rank 2 of a 4-rank plan run mid-training: every rank ends
#     within 10 s, the launcher names rank 2, no rank process is left.
#   faults.sh interrupted NNS_BINARY
#     a 2-rank run started as a script's background job (SIGINT ignored by
#     the shell) ends on `kill -INT` within 5 s, its ranks with it.
#   faults.sh save-killed NNS_BINARY
#     a 2-rank plan run (cosine schedule) saving every 2 steps is killed
#     while it saves step 4 (NNS_FAULT, backend/runtime/fault.h): the step-2
#     checkpoint survives, the torn step-4 folder is refused and cleaned,
#     and resuming gives losses, rates and final weights bit-identical to an
#     unbroken run. The same for one device and its single-file checkpoint,
#     whose stale temporary the next save removes.
set -euo pipefail
what="$1"
NNS="$2"
cd "$(dirname "$0")/../.."
tmp="$(mktemp -d)"
launcher=""
cleanup() {
  if [ -n "$launcher" ]; then kill -9 "$launcher" 2> /dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$tmp"/*.log; do [ -e "$f" ] && { echo "--- $f"; tail -20 "$f"; }; done; exit 1; }

# The rank processes of launcher $1 ("nns rank R" is their name).
rank_pids() { pgrep -P "$1" || true; }
# Whether process $1 still runs (a zombie has ended: only its entry is left).
running() { [ -e "/proc/$1/stat" ] && [ "$(awk '{ print $3 }' "/proc/$1/stat" 2> /dev/null)" != Z ]; }
rank_pid() {
  local p
  for p in $(rank_pids "$1"); do
    [ "$(cat "/proc/$p/comm" 2> /dev/null)" = "nns rank $2" ] && { echo "$p"; return; }
  done
}

case "$what" in
rank-killed)
  "$NNS" run examples/gpt.nns --config tiny --gpus 4 --plan hybrid --steps 1000000 > "$tmp/run.log" 2> "$tmp/err.log" &
  launcher=$!
  for _ in $(seq 600); do grep -q '^step *3/' "$tmp/run.log" && break; sleep 0.1; done
  grep -q '^step *3/' "$tmp/run.log" || fail "the run did not reach step 3"
  ranks="$(rank_pids "$launcher")"
  [ "$(echo "$ranks" | wc -w)" = 4 ] || fail "expected 4 rank processes, found: $ranks"
  victim="$(rank_pid "$launcher" 2)"
  [ -n "$victim" ] || fail "no process named 'nns rank 2'"
  start=$(date +%s.%N)
  kill -9 "$victim"
  rc=0
  for _ in $(seq 150); do kill -0 "$launcher" 2> /dev/null || break; sleep 0.1; done
  if kill -0 "$launcher" 2> /dev/null; then fail "the launcher still runs 15 s after rank 2 was killed"; fi
  wait "$launcher" || rc=$?
  launcher=""
  took=$(echo "$(date +%s.%N) - $start" | bc)
  [ "$rc" != 0 ] || fail "the run exited 0 after a rank was killed"
  grep -q "nns: rank 2 failed (signal 9)" "$tmp/err.log" || fail "the launcher did not name rank 2"
  for p in $ranks; do
    if running "$p"; then fail "rank process $p still runs"; fi
  done
  awk -v t="$took" 'BEGIN { if (t > 10) exit 1 }' || fail "the ranks took ${took}s to end (limit 10 s)"
  printf 'rank 2 killed at step %s: all ranks ended in %.2f s, exit %s, no rank left\n' \
    "$(sed -n 's/^step *\([0-9]*\)\/.*/\1/p' "$tmp/run.log" | tail -1)" "$took" "$rc"
  ;;
interrupted)
  "$NNS" run examples/gpt.nns --config tiny --gpus 2 --steps 1000000 > "$tmp/run.log" 2> "$tmp/err.log" &
  launcher=$!
  for _ in $(seq 600); do grep -q '^step *3/' "$tmp/run.log" && break; sleep 0.1; done
  grep -q '^step *3/' "$tmp/run.log" || fail "the run did not reach step 3"
  ranks="$(rank_pids "$launcher")"
  kill -INT "$launcher"
  # 15 s: the launcher stops its ranks at once; the margin is for a loaded machine.
  for _ in $(seq 150); do kill -0 "$launcher" 2> /dev/null || break; sleep 0.1; done
  if kill -0 "$launcher" 2> /dev/null; then fail "SIGINT did not stop a background run within 15 s"; fi
  rc=0; wait "$launcher" || rc=$?
  launcher=""
  for p in $ranks; do
    if running "$p"; then fail "rank process $p still runs after the interrupt"; fi
  done
  grep -q "nns: interrupted (signal 2); stopping the ranks" "$tmp/err.log" || fail "the launcher did not say it was interrupted"
  [ "$rc" = 130 ] || fail "exit $rc after SIGINT, expected 130"
  echo "background run interrupted: exit $rc, its ranks gone"
  ;;
save-killed)
  model=(examples/gpt.nns --config tiny)
  # Drops the timing field: everything else must be identical.
  exact() { sed 's/, "ms": [0-9.]*//' "$1"; }
  for mode in plan single; do
    if [ "$mode" = plan ]; then
      run=("${model[@]}" --gpus 2 --plan megatron)
      ck="$tmp/ck-plan"
      fault="shard-written:1:4"
    else
      run=("${model[@]}")
      ck="$tmp/ck-single.safetensors"
      fault="before-rename:0:4"
    fi
    "$NNS" run "${run[@]}" --steps 6 --metrics "$tmp/u-$mode.jsonl" --save "$tmp/u-$mode" > "$tmp/u-$mode.log" 2>&1 || fail "$mode: unbroken run"
    rc=0
    # The same --steps as the unbroken run: it sets the schedule's horizon,
    # which the checkpoints save and the resumed run keeps.
    (NNS_FAULT="$fault" exec "$NNS" run "${run[@]}" --steps 6 --save-every 2 --save "$ck" > "$tmp/b-$mode.log" 2>&1) 2> /dev/null || rc=$?
    [ "$rc" != 0 ] || fail "$mode: the run killed during its step-4 save exited 0"
    grep -q "fault injection (NNS_FAULT): killing rank" "$tmp/b-$mode.log" || fail "$mode: the fault did not fire"
    if [ "$mode" = plan ]; then
      [ "$(cat "$ck/latest")" = "step-2" ] || fail "plan: latest is not step-2 after the killed save"
      [ -d "$ck/step-4" ] || fail "plan: the interrupted save left no step-4 folder (the fault came too late?)"
      "$NNS" ckpt merge "$ck" -o "$tmp/m.safetensors" | grep -q "step 2 ->" || fail "plan: merge does not give step 2"
      # Without `latest` nothing proves a save finished: refused, exit 65.
      mv "$ck/latest" "$tmp/latest.kept"
      rc=0; "$NNS" run "${run[@]}" --steps 6 --resume "$ck" > "$tmp/torn.log" 2>&1 || rc=$?
      [ "$rc" = 65 ] && grep -q "no complete checkpoint" "$tmp/torn.log" || fail "plan: a folder without latest: exit $rc"
      mv "$tmp/latest.kept" "$ck/latest"
      # A shard changed after its save: the manifest's checksum says so.
      cp "$ck/step-2/rank-0.safetensors" "$tmp/rank0.kept"
      printf 'X' | dd of="$ck/step-2/rank-0.safetensors" bs=1 seek=200 conv=notrunc 2> /dev/null
      rc=0; "$NNS" run "${run[@]}" --steps 6 --resume "$ck" > "$tmp/torn.log" 2>&1 || rc=$?
      [ "$rc" = 65 ] && grep -q "the file changed after the save" "$tmp/torn.log" || fail "plan: a corrupted shard: exit $rc"
      cp "$tmp/rank0.kept" "$ck/step-2/rank-0.safetensors"
    else
      ls "$ck".tmp.* > /dev/null 2>&1 || fail "single: the killed save left no temporary (the fault came too late?)"
    fi
    "$NNS" run "${run[@]}" --steps 6 --resume "$ck" --metrics "$tmp/r-$mode.jsonl" --save "$ck" > "$tmp/r-$mode.log" 2>&1 || fail "$mode: resume"
    grep -q '^step    3/6' "$tmp/r-$mode.log" || fail "$mode: the resumed run did not start at step 3"
    diff <(exact "$tmp/u-$mode.jsonl" | tail -4) <(exact "$tmp/r-$mode.jsonl") > /dev/null || {
      diff <(exact "$tmp/u-$mode.jsonl" | tail -4) <(exact "$tmp/r-$mode.jsonl") || true
      fail "$mode: resumed steps 3-6 differ from the unbroken run"
    }
    if [ "$mode" = plan ]; then
      [ "$(cat "$ck/latest")" = "step-6" ] && [ ! -e "$ck/step-4" ] && [ ! -e "$ck/step-2" ] || fail "plan: old or torn folders left: $(ls "$ck")"
      "$NNS" ckpt merge "$tmp/u-$mode" -o "$tmp/u.safetensors" > /dev/null
      "$NNS" ckpt merge "$ck" -o "$tmp/r.safetensors" > /dev/null
      cmp -s "$tmp/u.safetensors" "$tmp/r.safetensors" || fail "plan: final checkpoints differ"
    else
      if ls "$ck".tmp.* > /dev/null 2>&1; then fail "single: the stale temporary is still there after the next save"; fi
      cmp -s "$tmp/u-$mode" "$ck" || fail "single: final checkpoints differ"
    fi
    echo "$mode: killed in the step-4 save; resumed from step 2: steps 3-6 (loss, lr, |g|) and the final checkpoint bit-identical"
  done
  ;;
*)
  echo "usage: faults.sh rank-killed|interrupted|save-killed NNS_BINARY"
  exit 64
  ;;
esac
echo "PASS"

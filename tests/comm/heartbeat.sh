#!/usr/bin/env bash
# A rank that stops (SIGSTOP) mid-run is found by the others' heartbeats
# (heartbeat.h) within the 8 s limit, not by the 60 s collective timeout:
# rank 0 exits 70 within 15 s with a message naming rank 1.
#   heartbeat.sh NNS_BINARY
set -uo pipefail
NNS="$1"
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
for r in 0 1; do
  env NNS_LAUNCHER=local NNS_RANK=$r NNS_WORLD_SIZE=2 NNS_MASTER_PORT=$port NNS_JOB_ID=hb$port \
    "$NNS" run examples/01_mlp.nns --steps 10000000 > "$tmp/rank$r.out" 2>&1 &
  pids+=($!)
done
# Mid-run: once rank 0 has printed a few steps, both ranks are training.
for _ in $(seq 600); do
  out=$(cat "$tmp/rank0.out")
  grep -q "^step  *5/" <<<"$out" && break
  sleep 0.1
done
if ! grep -q "^step  *5/" <<<"$out"; then echo "FAIL: the run did not start"; tail -3 "$tmp/rank0.out"; exit 1; fi
kill -STOP "${pids[1]}"
start=$(date +%s.%N)
for _ in $(seq 300); do kill -0 "${pids[0]}" 2>/dev/null || break; sleep 0.1; done
if kill -0 "${pids[0]}" 2>/dev/null; then echo "FAIL: rank 0 still runs 30 s after rank 1 stopped"; exit 1; fi
wait "${pids[0]}"; rc=$?
took=$(echo "$(date +%s.%N) - $start" | bc)
out=$(tail -2 "$tmp/rank0.out")
if [ $rc != 70 ] || ! grep -qF "nns comm: rank 1 sent no heartbeat for" <<<"$out"; then
  echo "FAIL: rank 0 exited $rc without naming rank 1:"; echo "$out"; exit 1
fi
if [ "$(echo "$took > 15" | bc)" = 1 ]; then echo "FAIL: rank 0 took $took s to stop (want < 15 s)"; exit 1; fi
echo "PASS: rank 0 stopped $took s after rank 1 was stopped, naming it"

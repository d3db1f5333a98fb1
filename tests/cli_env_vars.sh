#!/usr/bin/env bash
# Launch variables and NNS_* variables with bad values: exit 64 at once,
# naming the variable, never a wait for peers that will not come or a value
# silently read as 0 (each command under a 20 s timeout).
#   cli_env_vars.sh NNS_BINARY
set -uo pipefail
NNS="$1"
cd "$(dirname "$0")/.."
fail=0
expect() {  # MESSAGE VAR=VALUE... (then the run)
  local msg=$1
  shift
  local out rc
  out=$(env "$@" timeout 20 "$NNS" run examples/01_mlp.nns --steps 1 2>&1); rc=$?
  if [ "$rc" != 64 ] || ! grep -qF -- "$msg" <<<"$out"; then
    echo "FAIL: $* nns run: exit $rc (want 64), output:"; echo "$out" | tail -3 | sed 's/^/    /'; fail=1
  fi
}
expect "RANK=' 1' is not a non-negative integer" "RANK= 1" WORLD_SIZE=2
expect "WORLD_SIZE=100000 is more than the 65536 ranks" RANK=0 WORLD_SIZE=100000
expect "local rank 99 of 2 on this host does not fit" RANK=0 WORLD_SIZE=2 LOCAL_RANK=99 LOCAL_WORLD_SIZE=2
expect "local rank 0 of 0 on this host" RANK=0 WORLD_SIZE=2 LOCAL_WORLD_SIZE=0
expect "local rank 0 of 1000000 on this host" RANK=0 WORLD_SIZE=2 LOCAL_WORLD_SIZE=1000000
for v in abc -1 1e12; do expect "NNS_COMM_SPIN_US='$v': expected an integer from 0 to 10000000" NNS_COMM_SPIN_US=$v; done
expect "NNS_BIND='2': expected 0 or 1" NNS_BIND=2
expect "NNS_THREADS='-1': expected an integer from 1 to 4096" NNS_THREADS=-1
expect "NNS_COMM_TIMEOUT='inf': expected a number of seconds" NNS_COMM_TIMEOUT=inf
# Local ranks are capped by cores and memory, with an explicit override.
out=$(timeout 60 "$NNS" run examples/01_mlp.nns --steps 1 --gpus 65536 2>&1); rc=$?
if [ $rc != 64 ] || ! grep -qF "65536 local ranks on" <<<"$out"; then echo "FAIL: --gpus 65536: exit $rc"; echo "$out" | tail -2; fail=1; fi
# ... before the model is elaborated and 65536 programs lowered (18 s).
if grep -qF "program:" <<<"$out"; then echo "FAIL: --gpus 65536 lowered the ranks' programs before refusing"; fail=1; fi
out=$(NNS_MAX_LOCAL_RANKS=1 timeout 60 "$NNS" run examples/01_mlp.nns --steps 1 --gpus 2 2>&1); rc=$?
if [ $rc != 64 ] || ! grep -qF "more than NNS_MAX_LOCAL_RANKS=1" <<<"$out"; then echo "FAIL: NNS_MAX_LOCAL_RANKS=1 --gpus 2: exit $rc"; fail=1; fi
# Two jobs on one MASTER_PORT: job B's rank 1 reaches job A's store and is
# refused at once, naming both jobs (rank 0 of A then times out alone).
port=$((20000 + RANDOM % 20000))
run_rank() {  # RANK JOB
  env NNS_LAUNCHER=local NNS_RANK=$1 NNS_WORLD_SIZE=2 NNS_MASTER_PORT=$port NNS_JOB_ID=$2 NNS_COMM_TIMEOUT=4 \
    timeout 30 "$NNS" run examples/01_mlp.nns --steps 1 2>&1
}
run_rank 0 A > /dev/null &
a=$!
sleep 1
out=$(run_rank 1 B); rc=$?
wait $a
if [ $rc != 70 ] || ! grep -qF "rank 1 of job NNS_JOB_ID=B reached the rendezvous of another job (NNS_JOB_ID=A)" <<<"$out"; then
  echo "FAIL: a rank of job B joined job A's rendezvous: exit $rc"; echo "$out" | tail -2; fail=1
fi
exit $fail

#!/usr/bin/env bash
# Ranks started one process each, as torchrun, srun and mpirun start them
# (their variables set by hand here): they must train exactly as
# `nns run --gpus 2` does, refuse a --gpus that disagrees, and a rank whose
# peer never comes must fail within NNS_COMM_TIMEOUT instead of hanging.
set -uo pipefail
NNS=${1:?usage: external_launch.sh NNS_BINARY}
cd "$(dirname "$0")/../.."
MODEL=(examples/gpt.nns --config tiny --plan megatron --steps 3)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
losses() { grep -E '^step ' "$1" | awk '{print $3, $5}'; }

"$NNS" run "${MODEL[@]}" --gpus 2 > "$tmp/local.out" 2>&1 || fail "local run: $(cat "$tmp/local.out")"
losses "$tmp/local.out" > "$tmp/local.losses"
[ -s "$tmp/local.losses" ] || fail "no loss lines in the local run"

# launch NAME VARS-OF-RANK-0 VARS-OF-RANK-1 [extra flags]: both ranks in the
# background, env -i-free (the rest of the environment stays).
launch() {
  local name=$1 v0=$2 v1=$3
  shift 3
  env $v0 "$NNS" run "${MODEL[@]}" "$@" > "$tmp/$name.0" 2> "$tmp/$name.0.err" &
  local p0=$!
  env $v1 "$NNS" run "${MODEL[@]}" "$@" > "$tmp/$name.1" 2> "$tmp/$name.1.err" &
  local p1=$!
  wait $p0 || fail "$name rank 0 exited $?: $(cat "$tmp/$name.0.err")"
  wait $p1 || fail "$name rank 1 exited $?: $(cat "$tmp/$name.1.err")"
  losses "$tmp/$name.0" > "$tmp/$name.losses"
  cmp -s "$tmp/local.losses" "$tmp/$name.losses" ||
    fail "$name: losses differ from nns run --gpus 2: $(paste "$tmp/local.losses" "$tmp/$name.losses")"
  [ ! -s "$tmp/$name.1" ] || fail "$name: rank 1 printed on stdout: $(head -3 "$tmp/$name.1")"
  grep -q "on 2 CPU rank" "$tmp/$name.0" || fail "$name: rank 0 does not report 2 ranks: $(head -5 "$tmp/$name.0")"
  echo "ok: $name"
}

p=$(free_port)
launch torchrun "RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$p" \
                "RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$p"
p=$(free_port)
launch slurm "SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_LOCALID=0 SLURM_STEP_ID=0 SLURM_TASKS_PER_NODE=2 SLURM_JOB_NODELIST=localhost MASTER_PORT=$p" \
             "SLURM_PROCID=1 SLURM_NTASKS=2 SLURM_LOCALID=1 SLURM_STEP_ID=0 SLURM_TASKS_PER_NODE=2 SLURM_JOB_NODELIST=localhost MASTER_PORT=$p" --gpus 2
p=$(free_port)
launch openmpi "OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=0 OMPI_COMM_WORLD_LOCAL_SIZE=2 NNS_MASTER_PORT=$p" \
               "OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=1 OMPI_COMM_WORLD_LOCAL_SIZE=2 NNS_MASTER_PORT=$p"

# A --gpus that disagrees with the launcher's world: usage error, no rank started.
env RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 "$NNS" run "${MODEL[@]}" --gpus 4 > "$tmp/mismatch" 2>&1
rc=$?
[ $rc -eq 64 ] || fail "--gpus 4 under a world of 2: exit $rc, expected 64: $(cat "$tmp/mismatch")"
grep -q "torchrun started 2 ranks" "$tmp/mismatch" || fail "mismatch message: $(cat "$tmp/mismatch")"
echo "ok: --gpus mismatch is a usage error"

# Malformed variables: usage error naming the variable.
env RANK=one WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 "$NNS" run "${MODEL[@]}" > "$tmp/bad" 2>&1
rc=$?
[ $rc -eq 64 ] && grep -q "RANK='one'" "$tmp/bad" || fail "RANK=one: exit $rc: $(cat "$tmp/bad")"
echo "ok: a malformed RANK is a usage error"

# --trace needs nns's own launcher (it merges the ranks' parts).
env RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 "$NNS" run "${MODEL[@]}" --trace "$tmp/t.json" > "$tmp/trace" 2>&1
rc=$?
[ $rc -eq 64 ] && grep -q "trace needs ranks launched by nns" "$tmp/trace" || fail "--trace: exit $rc: $(cat "$tmp/trace")"
echo "ok: --trace under a foreign launcher is refused"

# Rank 1 never starts: rank 0 must give up within its timeout (no hang).
p=$(free_port)
start=$(date +%s)
env NNS_COMM_TIMEOUT=3 RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$p timeout 60 "$NNS" run "${MODEL[@]}" > "$tmp/alone" 2>&1
rc=$?
elapsed=$(( $(date +%s) - start ))
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "rank 0 without its peer: exit $rc after ${elapsed}s: $(tail -3 "$tmp/alone")"
echo "ok: rank 0 without its peer fails (exit $rc after ${elapsed}s)"

# NNS_LAUNCHER=local: the foreign variables are ignored, nns forks its own ranks.
env NNS_LAUNCHER=local RANK=1 WORLD_SIZE=2 MASTER_ADDR=nowhere MASTER_PORT=1 "$NNS" run "${MODEL[@]}" --gpus 2 > "$tmp/forced" 2>&1 ||
  fail "NNS_LAUNCHER=local: $(cat "$tmp/forced")"
losses "$tmp/forced" | cmp -s "$tmp/local.losses" - || fail "NNS_LAUNCHER=local: losses differ"
echo "ok: NNS_LAUNCHER=local"
echo "external launch: all passed"

#!/usr/bin/env bash
# NNS_STORE_SECRET (tcp_store.h), on loopback: ranks that share the secret
# train; a rank without it, or with another, is refused by the store with a
# message and exits 70 (rank 0 then times out alone, NNS_COMM_TIMEOUT=4).
#   store_secret.sh NNS_BINARY
set -uo pipefail
NNS="$1"
cd "$(dirname "$0")/../.."
fail=0
run_pair() {  # SECRET_OF_RANK_0 SECRET_OF_RANK_1 (empty: unset); prints rank 1's output, returns its exit code
  local port=$((20000 + RANDOM % 20000)) a rc
  env NNS_LAUNCHER=local NNS_RANK=0 NNS_WORLD_SIZE=2 NNS_MASTER_PORT=$port NNS_COMM_TIMEOUT=4 NNS_STORE_SECRET="$1" \
    timeout 30 "$NNS" run examples/01_mlp.nns --steps 1 > /dev/null 2>&1 &
  a=$!
  sleep 0.5
  env NNS_LAUNCHER=local NNS_RANK=1 NNS_WORLD_SIZE=2 NNS_MASTER_PORT=$port NNS_COMM_TIMEOUT=4 NNS_STORE_SECRET="$2" \
    timeout 30 "$NNS" run examples/01_mlp.nns --steps 1 2>&1
  rc=$?
  wait $a
  return $rc
}
out=$(run_pair s3cret s3cret); rc=$?
if [ $rc != 0 ]; then echo "FAIL: ranks sharing the secret: exit $rc"; echo "$out" | tail -3; fail=1; fi
out=$(run_pair s3cret ""); rc=$?
if [ $rc != 70 ] || ! grep -qF "requires a shared secret (NNS_STORE_SECRET) that this rank lacks" <<<"$out"; then
  echo "FAIL: a rank without the secret: exit $rc"; echo "$out" | tail -3; fail=1
fi
out=$(run_pair s3cret wrong); rc=$?
if [ $rc != 70 ] || ! grep -qF "that this rank does not match" <<<"$out"; then
  echo "FAIL: a rank with a wrong secret: exit $rc"; echo "$out" | tail -3; fail=1
fi
if grep -qF "s3cret" <<<"$out"; then echo "FAIL: the secret appears in a message"; fail=1; fi
[ $fail = 0 ] && echo "PASS: the store admits only ranks with its secret"
exit $fail

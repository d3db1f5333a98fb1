#!/usr/bin/env bash
# The two ways a rank waits for a peer's message (comm_spin: poll for a
# while, then sleep in poll(); launcher.h) and the core binding of local
# ranks give the same training: the losses of every step agree exactly
# with spinning off and binding off (NNS_COMM_SPIN_US=0 NNS_BIND=0), with
# the defaults, and with a long spin — for collectives (mlp megatron) and
# send/recv (gpt tiny_pipe 1F1B).
set -euo pipefail
NNS="$1"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
losses() { grep -E '^step +[0-9]+/' | awk '{print $2, $4}'; }
for spec in "examples/01_mlp.nns small megatron" "examples/gpt.nns tiny_pipe pipeline"; do
  read -r file config plan <<<"$spec"
  run() { env "$@" "$NNS" run "$file" --config "$config" --plan "$plan" --gpus 2 --steps 4 2>&1 | losses; }
  off="$(run NNS_COMM_SPIN_US=0 NNS_BIND=0)"
  default="$(run NNS_UNUSED=1)"
  long="$(run NNS_COMM_SPIN_US=5000)"
  [ "$(wc -l <<<"$off")" -eq 4 ] || { echo "FAIL: $file $plan: expected 4 steps, got: $off"; exit 1; }
  [ "$off" = "$default" ] || { echo "FAIL: $file $plan: defaults differ from spin/bind off:"; diff <(echo "$off") <(echo "$default"); exit 1; }
  [ "$off" = "$long" ] || { echo "FAIL: $file $plan: a 5 ms spin differs:"; diff <(echo "$off") <(echo "$long"); exit 1; }
  echo "ok: $file $plan: $(tail -1 <<<"$off")"
done

#!/usr/bin/env bash
# A gpt tiny step on one device with default settings, quiet and with a
# neighbour competing for the cores: a shell busy loop (--neighbour loop,
# the default) or another nns training swin tiny with default settings
# (--neighbour nns, the same binary). OpenMP threads that spin while they
# wait for a descheduled partner take the cores the partner needs. nns's
# default for one device (backend/runtime/cpu/thread_policy.h) uses no more
# threads than the work keeps busy and than the cores other processes leave
# idle; ranks of one run sleep when they wait (OMP_WAIT_POLICY=PASSIVE, set
# by nns). Quiet and busy runs alternate;
# prints each pair, then the median and range of each and the busy/quiet
# ratio of the medians.
#   bench/busy_core.sh [--repeat R] [--steps S] [--neighbour loop|nns]    NNS=path selects the binary
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NNS="${NNS:-$ROOT/build/nns}"
REPEAT=5
STEPS=20
NEIGHBOUR=loop
while [ $# -gt 0 ]; do
  case "$1" in
    --repeat) REPEAT="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --neighbour) NEIGHBOUR="$2"; shift 2 ;;
    *) echo "busy_core.sh: unknown argument '$1'" >&2; exit 64 ;;
  esac
done
cd "$ROOT"
ms() { sed -n 's/^done: .*, \([0-9.]*\) ms\/step.*/\1/p'; }
step_ms() { "$NNS" run examples/gpt.nns --config tiny --steps "$STEPS" | ms; }
# median and range of the numbers on stdin
stats() { sort -g | awk '{ v[NR] = $1 } END { printf "%.2f (%.2f-%.2f)", (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2), v[1], v[NR] }'; }

# Starts the neighbour in the background; its pid in $spin.
start_neighbour() {
  case "$NEIGHBOUR" in
    loop) ( while :; do :; done ) & ;;
    nns) "$NNS" run examples/swin.nns --config tiny --steps 1000000 > /dev/null 2>&1 & ;;
    *) echo "busy_core.sh: --neighbour is loop or nns" >&2; exit 64 ;;
  esac
  spin=$!
  sleep 0.5  # past the neighbour's start-up
}

echo "gpt tiny, 1 device, default threads ($(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)), ms/step of steps 2..$STEPS; neighbour: $NEIGHBOUR; NNS=$NNS"
quiet=() busy=()
for i in $(seq "$REPEAT"); do
  q="$(step_ms)"
  start_neighbour
  b="$(step_ms)"
  kill "$spin"
  wait "$spin" 2>/dev/null || true
  printf 'run %d: quiet %8.2f  busy %8.2f\n' "$i" "$q" "$b"
  quiet+=("$q") busy+=("$b")
done
qs="$(printf '%s\n' "${quiet[@]}" | stats)"
bs="$(printf '%s\n' "${busy[@]}" | stats)"
echo "quiet: median $qs ms; busy: median $bs ms; busy/quiet $(awk -v b="${bs%% *}" -v q="${qs%% *}" 'BEGIN { printf "%.2f", b / q }')"

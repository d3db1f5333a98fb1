#!/usr/bin/env bash
# nns run --device: a value other than cpu|cuda|cuda-emulation is a usage error (64);
# --device cuda where no GPU is visible (CUDA_VISIBLE_DEVICES hides them
# all) is one clear line and exit 70, naming why: no device, or a build
# without CUDA; with the GPUs hidden the default is the CPU.
#   cli_device.sh NNS_BINARY CUDA_BUILT(ON|OFF)
set -uo pipefail
NNS="$1"
BUILT="$2"
cd "$(dirname "$0")/.."
fail=0
expect() {  # EXIT MESSAGE ARGS...
  local want=$1 msg=$2
  shift 2
  local out rc
  out=$(CUDA_VISIBLE_DEVICES= "$NNS" "$@" 2>&1); rc=$?
  if [ "$rc" != "$want" ] || ! grep -qF -- "$msg" <<<"$out"; then
    echo "FAIL: nns $*: exit $rc (want $want), output:"; echo "$out" | tail -3 | sed 's/^/    /'; fail=1
  fi
  last_out="$out"
}
expect 64 "--device for run is cpu, cuda or cuda-emulation (got 'gpu')" run examples/01_mlp.nns --device gpu
if [ "$BUILT" = ON ]; then
  expect 70 "nns: error: --device cuda: no CUDA device is visible" run examples/01_mlp.nns --device cuda
  expect 70 "nns: error: --device cuda: no CUDA device is visible" run examples/01_mlp.nns --device cuda --plan dp --gpus 2
else
  expect 70 "nns: error: --device cuda: this nns was built without CUDA" run examples/01_mlp.nns --device cuda
fi
[ "$(wc -l <<<"$last_out")" = 1 ] || { echo "FAIL: the --device cuda error is not one line:"; echo "$last_out"; fail=1; }
expect 0 "on 1 CPU rank(s)" run examples/01_mlp.nns --steps 1
expect 0 "  stats (rank 0): host->device" run examples/01_mlp.nns --steps 1 --device cpu --stats
expect 64 "--eval runs forward passes only; it does not take --stats" run examples/01_mlp.nns --eval --stats
# The emulation runs anywhere; like cuda it is not the CPU reference.
expect 0 "CUDA-emulated" run examples/01_mlp.nns --steps 1 --device cuda-emulation
expect 64 "it does not take --device cuda-emulation" run examples/01_mlp.nns --steps 1 --device cuda-emulation --reference
# --comm: where a plan's collectives run (auto|gloo|nccl), in the banner.
expect 64 "--comm is auto, gloo or nccl (got 'mpi')" run examples/01_mlp.nns --plan dp --gpus 2 --comm mpi
expect 64 "--comm picks where a plan's collectives run; it needs --plan NAME" run examples/01_mlp.nns --comm gloo
expect 70 "nns: error: --comm nccl: NCCL needs the CUDA backend (--device cuda); this run is on cpu" run examples/01_mlp.nns --plan dp --gpus 2 --comm nccl
expect 70 "nns: error: --comm nccl: the CUDA emulation's memory is host memory" run examples/01_mlp.nns --plan dp --gpus 2 --device cuda-emulation --comm nccl
# A plain run prints the banner, its steps and the summary, nothing else.
out=$("$NNS" run examples/gpt.nns --steps 3 2>&1)
if other=$(grep -vE '^(nns: training |step +[0-9]+/[0-9]+ |done: )' <<<"$out"); then
  echo "FAIL: a plain run printed other lines:"; echo "$other" | sed 's/^/    /'; fail=1
fi
# CPU ranks left to the default (Gloo, the only choice) print no collectives line.
out=$("$NNS" run examples/01_mlp.nns --plan dp --gpus 2 --steps 1 2>&1)
if grep -q "nns: collectives" <<<"$out"; then echo "FAIL: a default CPU run printed its collectives line"; fail=1; fi
expect 0 "nns: collectives: Gloo; --comm gloo" run examples/01_mlp.nns --plan dp --gpus 2 --steps 1 --comm gloo
expect 0 "nns: collectives: Gloo, staged through host memory; the CUDA emulation" run examples/01_mlp.nns --plan dp --gpus 2 --steps 1 --device cuda-emulation
[ "$fail" = 0 ] && echo PASS
exit $fail

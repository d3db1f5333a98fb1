#!/usr/bin/env bash
# The GPU kit starts on a machine that has only the kit and the CUDA
# libraries: scripts/gpu_kit.sh packs this build (fast compression), the
# archive is unpacked into a fresh folder, and under `env -i` with only the
# kit's lib/ and the CUDA library folder on the library path
#   - ldd finds every library of every kit binary (no "not found");
#   - nns --version opens cuBLASLt (not linked: cublaslt_loader.h);
#   - nns --version and a 2-step CPU run of examples/01_mlp.nns work;
#   - the CUDA conformance table reports itself skipped (exit 77) here,
#     where no GPU is visible (on the GPU machine it runs).
# The archive must be at most 60 MiB (gpu_kit.sh checks it too).
#   gpu_kit_env.sh BUILD_DIR
set -uo pipefail
BUILD="$1"
cd "$(dirname "$0")/../.."
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail=0
if ! bash scripts/gpu_kit.sh --build "$BUILD" --out "$tmp/kit" --fast > "$tmp/make.log" 2>&1; then
  echo "FAIL: gpu_kit.sh:"; tail -5 "$tmp/make.log"; exit 1
fi
cat "$tmp/make.log"
[ -x "$tmp/kit/run.sh" ] || { echo "FAIL: no run.sh in the kit folder"; fail=1; }
mkdir "$tmp/unpacked"
xz -dc "$tmp/kit/nns-gpu-kit.tar.xz" | tar -C "$tmp/unpacked" -xf - || { echo "FAIL: cannot unpack the kit"; exit 1; }
cuda_libs=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib; do [ -d "$d" ] && cuda_libs="$cuda_libs:$d"; done
bare() { env -i LD_LIBRARY_PATH="$tmp/unpacked/lib$cuda_libs" NNS_STDLIB="$PWD/stdlib" "$@"; }
for b in "$tmp"/unpacked/bin/*; do
  deps="$(bare /usr/bin/ldd "$b" 2>&1)"
  if grep -q "not found" <<<"$deps"; then
    echo "FAIL: $(basename "$b") under env -i:"; grep "not found" <<<"$deps"; fail=1
  fi
done
bare "$tmp/unpacked/bin/nns" --version > "$tmp/version.txt" 2>&1 || { echo "FAIL: nns --version under env -i"; cat "$tmp/version.txt"; fail=1; }
# cuBLASLt is opened at run time (cublaslt_loader.h), not linked: ldd cannot
# vouch for it, --version opens it through the library path.
grep -q "cuBLASLt [0-9]" "$tmp/version.txt" || { echo "FAIL: nns --version under env -i did not open cuBLASLt:"; cat "$tmp/version.txt"; fail=1; }
bare "$tmp/unpacked/bin/nns" run examples/01_mlp.nns --steps 2 > "$tmp/run.txt" 2>&1 || { echo "FAIL: nns run under env -i"; tail -3 "$tmp/run.txt"; fail=1; }
bare "$tmp/unpacked/bin/nns_cuda_tests" > "$tmp/conf.txt" 2>&1
rc=$?
if command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1; then
  [ $rc = 0 ] || { echo "FAIL: the kit's conformance table on this GPU: exit $rc"; tail -5 "$tmp/conf.txt"; fail=1; }
else
  [ $rc = 77 ] && grep -q SKIPPED "$tmp/conf.txt" || { echo "FAIL: without a GPU the conformance table must report skipped (77), got $rc"; tail -3 "$tmp/conf.txt"; fail=1; }
fi
[ $fail = 0 ] && echo PASS
exit $fail

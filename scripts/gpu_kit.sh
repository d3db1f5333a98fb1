#!/usr/bin/env bash
# The GPU kit: everything a bare GPU machine (CUDA, its driver and Python
# wheels, no Debian packages) needs to run nns's GPU checks, made here.
#
#   scripts/gpu_kit.sh [--build DIR] [--out DIR] [--fast]
#
# Takes the CUDA-enabled build in DIR (default: build/ when it links the
# CUDA runtime, else it configures and builds build-gpu-kit/ with
# -DNNS_CUDA=ON), strips the `nns` executable and the GPU test binaries of
# their debug sections, and packs them with every shared library they load
# that the device image lacks into OUT/nns-gpu-kit.tar.xz (default OUT:
# gpu-kit/, ignored by git), beside OUT/run.sh, the device-side script.
#   - Bundled: what `ldd` resolves here outside glibc's own libraries and
#     the CUDA ones (ANTLR4 runtime, Z3, oneDNN, Gloo, libedit, libgomp,
#     libstdc++ and their dependencies).
#   - Not bundled: libcuda, libcudart, libcublas(Lt), libcudnn*, libnccl:
#     the device's own, found by run.sh (scripts/gpu_kit/run.sh).
#   - The archive must be at most 60 MiB (the tree and its carried folders
#     travel at 64 MiB); the script fails otherwise. --fast compresses less
#     (the ctest's check, not for carrying).
# Then: copy the tree with OUT (`carry: ["gpu-kit"]`) and run
#   bash gpu-kit/run.sh        (on the GPU machine, from the repository root)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="" OUT="$ROOT/gpu-kit" LEVEL=-6
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --fast) LEVEL=-1; shift ;;
    *) echo "gpu_kit.sh: unknown argument '$1'" >&2; exit 64 ;;
  esac
done
# ldd's output is captured first: `ldd | grep -q` under pipefail fails when
# grep exits at its match and ldd dies of SIGPIPE (seen in CI).
links_cuda() {
  [ -x "$1/nns" ] || return 1
  local deps
  deps="$(ldd "$1/nns")" || return 1
  grep -q 'libcudart\.so' <<<"$deps"
}
if [ -z "$BUILD" ]; then
  if links_cuda "$ROOT/build"; then BUILD="$ROOT/build"
  else
    BUILD="$ROOT/build-gpu-kit"
    cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNNS_CUDA=ON > /dev/null
    cmake --build "$BUILD" -j"$(nproc)" --target nns nns_cuda_tests nns_nccl_tests nns_nccl_collectives_tests
  fi
fi
links_cuda "$BUILD" || { echo "gpu_kit.sh: $BUILD/nns is not a CUDA build (no libcudart): configure with -DNNS_CUDA=ON" >&2; exit 65; }

BINARIES=("$BUILD/nns")
for t in nns_cuda_tests nns_nccl_tests nns_nccl_collectives_tests; do
  [ -x "$BUILD/tests/cuda/$t" ] && BINARIES+=("$BUILD/tests/cuda/$t")
done

stage="$OUT/stage"
rm -rf "$stage"
mkdir -p "$stage/bin" "$stage/lib"
for b in "${BINARIES[@]}"; do strip --strip-debug -o "$stage/bin/$(basename "$b")" "$b"; done

# Libraries the device provides itself: glibc's and the CUDA stack's.
device_has() {
  case "$1" in
    linux-vdso.so*|ld-linux*|libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libresolv.so*) return 0 ;;
    libcuda.so*|libcudart.so*|libcublas.so*|libcublasLt.so*|libcudnn*.so*|libnccl.so*|libnvrtc*.so*) return 0 ;;
  esac
  return 1
}
for b in "$stage"/bin/*; do
  while read -r name _ path _; do
    device_has "$name" && continue
    [ -n "${path:-}" ] && [ -f "$path" ] || { echo "gpu_kit.sh: $(basename "$b") needs $name, which ldd cannot find here" >&2; exit 70; }
    [ -f "$stage/lib/$name" ] || cp -L "$path" "$stage/lib/$name"
  done < <(ldd "$b" | awk '/=>/ { print $1, $2, $3 }')
done
cp "$ROOT/scripts/gpu_kit/run.sh" "$OUT/run.sh"
chmod +x "$OUT/run.sh"
git -C "$ROOT" rev-parse --short HEAD > "$stage/COMMIT" 2>/dev/null || echo unknown > "$stage/COMMIT"
nbin=$(ls "$stage/bin" | wc -l) nlib=$(ls "$stage/lib" | wc -l) raw=$(du -sm "$stage" | cut -f1)
tar -C "$stage" -cf - . | xz "$LEVEL" -T0 > "$OUT/nns-gpu-kit.tar.xz"
rm -rf "$stage"
bytes=$(stat -c %s "$OUT/nns-gpu-kit.tar.xz")
echo "gpu kit: $OUT/nns-gpu-kit.tar.xz, $((bytes / 1024 / 1024)) MiB ($nbin binaries, $nlib libraries; $raw MiB unpacked)"
[ "$bytes" -le $((60 * 1024 * 1024)) ] || { echo "gpu_kit.sh: the kit is over 60 MiB" >&2; exit 70; }

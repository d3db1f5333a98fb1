#!/usr/bin/env bash
# Runs one libFuzzer target (fuzz/README.md) for SECONDS, in one process.
#   scripts/fuzz.sh TARGET SECONDS     TARGET: parser | interpreter | dimop | safetensors | profile | env | plan
# Installs clang if missing, builds build-fuzz/ (NNS_FUZZ=ON: ASan + UBSan),
# writes the seeds (fuzz/seeds.py), then fuzzes with the corpus kept in
# build-fuzz/corpus/TARGET across runs. Crashes, timeouts (-timeout=10),
# out-of-memory (-rss_limit_mb=2048) and internal errors are findings: their
# inputs go to build-fuzz/artifacts/TARGET/ and the script exits 1.
# Reproduce one with: build-fuzz/fuzz/fuzz_TARGET FILE (NNS_FUZZ_VERBOSE=1
# shows the diagnostics).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { echo "usage: scripts/fuzz.sh parser|interpreter|dimop|safetensors|profile|env|plan SECONDS" >&2; exit 64; }
[ $# -eq 2 ] || usage
target=${1#fuzz_}
case "$target" in parser|interpreter|dimop|safetensors|profile|env|plan) ;; *) usage ;; esac
[[ "$2" =~ ^[1-9][0-9]*$ ]] || usage
seconds=$2

# Packages: the project's, then clang with libFuzzer's runtime.
scripts/setup.sh
missing=()
for p in clang libclang-rt-dev llvm; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "fuzz: installing ${missing[*]}"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

build=build-fuzz
cmake -S . -B "$build" -DNNS_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
cmake --build "$build" --target "fuzz_$target" -j"$(nproc)"

seeds=$build/seeds/$target corpus=$build/corpus/$target artifacts=$build/artifacts/$target
python3 fuzz/seeds.py "$target" "$seeds"
mkdir -p "$corpus" "$artifacts"
# Inputs of at most 4 KiB, except for the interpreter: its seeds are whole
# models (up to 16 KiB) that a cut would leave unparsable. The parser needs
# 0.2 s for 16 KiB of bad syntax (ANTLR's full-LL retry), and 5x that here.
max_len=4096
case "$target" in
  parser) dict=$build/seeds/nns.dict ;;
  interpreter) dict=$build/seeds/nns.dict max_len=0 ;;
  *) dict=fuzz/$target.dict ;;
esac

# The interpreter and safetensors targets write each input to a file: on
# tmpfs, not the disk (4x the executions for safetensors).
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then export TMPDIR=/dev/shm; fi
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
if command -v llvm-symbolizer > /dev/null; then export ASAN_SYMBOLIZER_PATH=${ASAN_SYMBOLIZER_PATH:-$(command -v llvm-symbolizer)}; fi
log=$build/fuzz_$target.log
start=$build/.fuzz_$target.start
touch "$start"
before=$(find "$artifacts" -type f | wc -l)
set +e
# New inputs go to the first folder (the kept corpus); the seeds are read only.
"$build/fuzz/fuzz_$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$artifacts/" \
  -max_len="$max_len" -dict="$dict" -print_final_stats=1 "$corpus" "$seeds" 2>&1 | tee "$log" | grep -v -e '^#[0-9]*.*\(NEW\|REDUCE\)' -e '^INFO:' -e '^	NEW_FUNC'
rc=${PIPESTATUS[0]}
set -e

stat() { sed -n "s/^stat::$1: *//p" "$log" | tail -1; }
execs=$(stat number_of_executed_units)
rate=$(stat average_exec_per_sec)
corp=$(grep -o 'corp: [0-9]*/[0-9]*[a-zA-Z]*' "$log" | tail -1 | sed 's/corp: //')
files=$(find "$corpus" -type f | wc -l)
findings=$(( $(find "$artifacts" -type f | wc -l) - before ))
[ "$rc" -ne 0 ] && [ "$findings" -eq 0 ] && findings=1
echo "fuzz_$target: ${execs:-?} executions, ${rate:-?} exec/s, corpus ${corp:-?} (${files} files in $corpus), $findings finding(s) in ${seconds} s"
if [ "$findings" -ne 0 ]; then
  find "$artifacts" -type f -newer "$start" | sed 's/^/  /'
  echo "  (the log: $log)"
  exit 1
fi

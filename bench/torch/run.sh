#!/usr/bin/env bash
# One training step of nns vs the same model in PyTorch (CPU, same thread
# count, same shapes), reported as a time ratio nns/torch.  A benchmark, not
# a test: it never fails on the ratio.  See bench/torch/README.md.
#
#   bench/torch/run.sh [--threads N] [--steps S] [--repeat R]
#                      [--blas openblas|system] [--nns PATH]
#
# --threads N   threads for both (nns --threads N; torch.set_num_threads(N),
#               OMP_NUM_THREADS=N, OPENBLAS_NUM_THREADS=N).        default 2
# --steps S     timed steps.  nns: `nns run --steps S`, mean of steps 2..S
#               (its "ms/step" summary); torch: mean of S steps after 2
#               warm-up steps.                                     default 20
# --repeat R    run the (nns, torch) pair R times, alternating, and report the
#               median of the R per-run means (R = 1: a single measurement;
#               an odd R > 1 damps noise on a shared machine).     default 3
# --blas B      Debian's python3-torch calls the generic libblas.so.3, which
#               is the unoptimised reference BLAS unless an optimised one is
#               installed.  openblas (default): if so, run torch with Debian's
#               OpenBLAS (pthread flavour) via LD_LIBRARY_PATH, fetched with
#               `apt-get download` into a cache folder (the system's BLAS
#               alternative is left alone).  system: whatever is installed.
# --nns PATH    the nns binary (default build/nns; built if missing).
# Environment: PYTHON=... picks the interpreter that has torch.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/bench/torch"
THREADS=2
STEPS=20
REPEAT=3
BLAS=openblas
NNS="$ROOT/build/nns"

while [ $# -gt 0 ]; do
  case "$1" in
    --threads) THREADS="$2"; shift 2 ;;
    --threads=*) THREADS="${1#*=}"; shift ;;
    --steps) STEPS="$2"; shift 2 ;;
    --steps=*) STEPS="${1#*=}"; shift ;;
    --repeat) REPEAT="$2"; shift 2 ;;
    --repeat=*) REPEAT="${1#*=}"; shift ;;
    --blas) BLAS="$2"; shift 2 ;;
    --blas=*) BLAS="${1#*=}"; shift ;;
    --nns) NNS="$2"; shift 2 ;;
    --nns=*) NNS="${1#*=}"; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 64 ;;
  esac
done
for v in "$THREADS" "$STEPS" "$REPEAT"; do
  [[ "$v" =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --threads/--steps/--repeat need positive integers" >&2; exit 64; }
done
[ "$STEPS" -ge 2 ] || { echo "run.sh: --steps must be at least 2 (nns times the steps after the first)" >&2; exit 64; }
case "$BLAS" in openblas|system) ;; *) echo "run.sh: --blas must be openblas or system" >&2; exit 64 ;; esac

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# ---- PyTorch -------------------------------------------------------------------------
has_torch() { "$1" -c 'import torch' >/dev/null 2>&1; }
PY=""
for cand in ${PYTHON:-} python3 /usr/bin/python3; do
  if command -v "$cand" >/dev/null 2>&1 && has_torch "$cand"; then PY="$cand"; break; fi
done
if [ -z "$PY" ]; then
  echo "== torch not importable; installing Debian's python3-torch with apt-get" >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-torch >&2
  # Debian's package is for Debian's interpreter, which may not be the first python3 on PATH.
  for cand in python3 /usr/bin/python3; do
    if command -v "$cand" >/dev/null 2>&1 && has_torch "$cand"; then PY="$cand"; break; fi
  done
  [ -n "$PY" ] || { echo "run.sh: python3-torch installed but neither python3 nor /usr/bin/python3 can import torch" >&2; exit 69; }
fi

# ---- BLAS for torch --------------------------------------------------------------------
TORCH_ENV=(env "OMP_NUM_THREADS=$THREADS" "OPENBLAS_NUM_THREADS=$THREADS")
blas_of() { "${TORCH_ENV[@]}" "$PY" -c 'import torch
libs = {l.split()[-1] for l in open("/proc/self/maps") if "blas" in l.rsplit("/", 1)[-1].lower()}
print(",".join(sorted(libs)) or "built-in")'; }
BLAS_LIB="$(blas_of)"
if [ "$BLAS" = openblas ] && [[ "$BLAS_LIB" == */blas/libblas.so* ]]; then
  # The reference BLAS (netlib, unblocked, one thread): not a fair baseline.
  OB_DIR=/usr/lib/x86_64-linux-gnu/openblas-pthread
  if [ ! -e "$OB_DIR/libblas.so.3" ]; then
    CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/nns-bench-torch"
    OB_DIR="$CACHE/root/usr/lib/x86_64-linux-gnu/openblas-pthread"
    if [ ! -e "$OB_DIR/libblas.so.3" ]; then
      echo "== torch would use the reference BLAS; fetching Debian's libopenblas0-pthread into $CACHE" >&2
      mkdir -p "$CACHE"
      rm -f "$CACHE"/libopenblas0-pthread_*.deb
      (cd "$CACHE" && apt-get download libopenblas0-pthread >&2) ||
        (as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 && cd "$CACHE" && apt-get download libopenblas0-pthread >&2)
      dpkg-deb -x "$CACHE"/libopenblas0-pthread_*.deb "$CACHE/root"
    fi
  fi
  TORCH_ENV+=("LD_LIBRARY_PATH=$OB_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  BLAS_LIB="$(blas_of)"
fi

# ---- nns -------------------------------------------------------------------------------
if [ ! -x "$NNS" ]; then
  echo "== $NNS missing; building it" >&2
  cmake --build "$ROOT/build" -j2 --target nns >&2
fi

cd "$ROOT"
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

CASES=("gpt examples/gpt.nns" "swin examples/swin.nns")
TORCH_VER="$("$PY" -c 'import torch; print(torch.__version__)')"
echo "nns vs PyTorch, one training step on CPU"
echo "  date:      $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "  host:      $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores visible, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "  nns:       $NNS --threads $THREADS --steps $STEPS (mean of steps 2..$STEPS)"
echo "  torch:     $TORCH_VER via $PY, set_num_threads($THREADS), $STEPS timed steps after 2 warm-up steps"
echo "  torch BLAS: $BLAS_LIB"
echo "  repeats:   $REPEAT, alternating nns/torch"
echo

ROWS=(); TCFG=()
for entry in "${CASES[@]}"; do
  read -r name file <<<"$entry"
  check="$("$NNS" check "$file" --config tiny)"
  nparams="$(sed -n 's/^ *parameters:.*(\([0-9]*\)).*/\1/p' <<<"$check")"
  gmacs="$(sed -n 's/^ *forward: *\([0-9.]*\) GMACs.*/\1/p' <<<"$check")"
  [ -n "$nparams" ] && [ -n "$gmacs" ] || { echo "run.sh: cannot parse 'nns check $file' output:" >&2; echo "$check" >&2; exit 70; }
  nns_ms=(); torch_ms=(); tline=""
  for ((r = 1; r <= REPEAT; r++)); do
    out="$("$NNS" run "$file" --config tiny --steps "$STEPS" --threads "$THREADS")"
    x="$(sed -n 's/^done: .*, \([0-9.]*\) ms\/step.*/\1/p' <<<"$out")"
    [ -n "$x" ] || { echo "run.sh: no 'done: ... ms/step' line from nns run $file:" >&2; echo "$out" | tail -5 >&2; exit 70; }
    nns_ms+=("$x")
    tline="$("${TORCH_ENV[@]}" "$PY" "$HERE/torch_step.py" "$name" --steps "$STEPS" --threads "$THREADS")"
    y="$(sed -n 's/.* ms_per_step=\([0-9.]*\).*/\1/p' <<<"$tline")"
    [ -n "$y" ] || { echo "run.sh: cannot parse torch output: $tline" >&2; exit 70; }
    torch_ms+=("$y")
    echo "  run $r/$REPEAT $name: nns $x ms/step, torch $y ms/step" >&2
  done
  TCFG+=("$(sed -n 's/^config //p' <<<"$tline")")
  tparams="$(sed -n 's/.* params=\([0-9]*\).*/\1/p' <<<"$tline")"
  tmacs="$(sed -n 's/.* fwd_macs=\([0-9]*\).*/\1/p' <<<"$tline")"
  nmed="$(printf '%s\n' "${nns_ms[@]}" | median)"
  tmed="$(printf '%s\n' "${torch_ms[@]}" | median)"
  ROWS+=("$name $file $nparams $tparams $gmacs $tmacs $nmed $tmed $(IFS=/; echo "${nns_ms[*]}") $(IFS=/; echo "${torch_ms[*]}")")
done

table() {  # $1: median|fastest
  printf '%-28s %12s %12s %12s %13s %13s\n' "case (--config tiny)" "nns ms/step" "torch ms/st" "nns/torch" "nns GFLOP/s" "torch GFLOP/s"
  for row in "${ROWS[@]}"; do
    read -r name file np tp gm tm nmed tmed nall tall <<<"$row"
    if [ "$1" = fastest ]; then
      nmed="$(tr / '\n' <<<"$nall" | sort -g | head -1)"; tmed="$(tr / '\n' <<<"$tall" | sort -g | head -1)"
    fi
    # GFLOP/s: the forward multiply-adds of `nns check` (printed to 3 decimals;
    # the torch twin's exact count is used when it rounds to the same value).
    awk -v f="$file" -v gm="$gm" -v tm="$tm" -v n="$nmed" -v t="$tmed" 'BEGIN {
      g = gm; if (sprintf("%.3f", tm / 1e9) == sprintf("%.3f", gm)) g = tm / 1e9
      flop = g * 1e9 * 2 * 3
      ratio = n / t
      printf "%-28s %12.2f %12.2f %11.2f%s %13.3f %13.3f\n", f, n, t, ratio, (ratio <= 1.0 ? " " : "!"), flop / (n * 1e6), flop / (t * 1e6)
    }'
  done
}
echo "median of the $REPEAT runs' mean ms/step:"
table median
if [ "$REPEAT" -gt 1 ]; then
  echo
  echo "fastest of the $REPEAT runs (load from other processes only ever adds time):"
  table fastest
fi
echo
for i in "${!ROWS[@]}"; do
  read -r name file np tp gm tm nmed tmed nall tall <<<"${ROWS[$i]}"
  same=$([ "$np" = "$tp" ] && echo "equal" || echo "MISMATCH")
  echo "  $name: parameters nns check $np, torch $tp ($same); forward MACs nns check ${gm} G, torch twin $tm; runs nns [$nall] torch [$tall] ms/step"
  echo "        torch twin read from $file: ${TCFG[$i]}"
done
echo
echo "  ratio = nns ms/step / torch ms/step; target <= 1.0 ('!' marks a case above it)."
echo "  GFLOP/s = forward MACs x 2 FLOPs x 3 (backward ~ 2x forward, so a step ~ 3x forward) / step time;"
echo "  an approximation that counts only matmul/linear/conv work (no softmax, norms, GELU, optimizer)."

#!/usr/bin/env bash
# --verify over every shipped plan of every example on 2, 4 and 8 ranks
# (where the plan's structure allows: `nns check` passes), AdamW as each
# example's train block sets it, STEPS steps (30 by default), the tiny
# config where there is one. Prints one table row per run: the verdict and
# the summary's figures. With OLD_NNS set to another nns binary (say one
# built from an earlier commit), each run is repeated with it and both
# verdicts are shown side by side. Slow: minutes per example on a busy CPU.
#   bench/verify_sweep.sh NNS_BINARY [EXAMPLE.nns...]
#   STEPS=3 RANKS="2 4" OLD_NNS=/path/to/old/nns bench/verify_sweep.sh build/nns examples/01_mlp.nns
set -uo pipefail
NNS="$1"
shift
cd "$(dirname "$0")/.."
files=("$@")
[ ${#files[@]} -eq 0 ] && files=(examples/*.nns)
STEPS="${STEPS:-30}"
RANKS="${RANKS:-2 4 8}"
OLD_NNS="${OLD_NNS:-}"

# One run's cell: the verdict, the largest gradient/loss error over the run
# and the update's ("PASS 1.70e-06/0.00e+00"), then under fp32's derived
# bounds the largest error/bound ratio with that tensor's error and bound
# ("0.0113 = 1.24e-06/1.10e-04 blocks.1.attn.wo k=2.1", k: the condition of
# that tensor's sum the bound was scaled by); the exit code when no
# summary was printed.
verdict() {
  local out="$1" rc="$2" line
  line=$(grep '^verify: largest relative error' <<<"$out" | head -1)
  if [ -z "$line" ]; then
    echo "exit $rc"
    return
  fi
  local v ratio
  v=$(grep -oE ': (PASS|FAIL)' <<<"$line" | head -1 | tr -d ': ')
  ratio=$(sed -nE 's/.*largest error\/bound ([^,]+), ([^ ]+) ([^ ]+) of ([^,;]+)(, condition ([^;]+))?;.*/\1 = \3\/\4 \2 k=\6/p' <<<"$line")
  echo "$v $(awk '{print $5}' <<<"$line")$(grep -oE ', [^ ]+ over the update' <<<"$line" | awk '{print "/" $2}') ${ratio}"
}

printf '%-14s %-24s %5s  %-72s %s\n' example plan ranks new old
fails=0
for f in "${files[@]}"; do
  cfg=()
  grep -q '^config tiny' "$f" && cfg=(--config tiny)
  plans=$("$NNS" check "$f" "${cfg[@]}" 2>&1 | sed -n 's/^  plans: *//p' | tr -d ',')
  for ranks in $RANKS; do
    for plan in $plans; do
      "$NNS" check "$f" "${cfg[@]}" --plan "$plan" --gpus "$ranks" >/dev/null 2>&1 || continue
      out=$("$NNS" run "$f" "${cfg[@]}" --plan "$plan" --gpus "$ranks" --steps "$STEPS" --verify 2>&1)
      new=$(verdict "$out" $?)
      old="-"
      if [ -n "$OLD_NNS" ]; then
        out=$("$OLD_NNS" run "$f" "${cfg[@]}" --plan "$plan" --gpus "$ranks" --steps "$STEPS" --verify 2>&1)
        old=$(verdict "$out" $?)
      fi
      [[ $new == PASS* ]] || fails=$((fails + 1))
      printf '%-14s %-24s %5s  %-72s %s\n' "$(basename "$f" .nns)" "$plan" "$ranks" "$new" "$old"
    done
  done
done
echo "runs not passing (new): $fails"

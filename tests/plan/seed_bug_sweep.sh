#!/usr/bin/env bash
# Every --seed-bug kind over every shipped plan of every example, on 2 and
# 4 ranks (and 4 ranks as 2 replicas of the plan on 2 devices, where the
# replica kinds apply): each seeded bug is either caught by program verification (exit
# 70 with a program error) or says it does not apply (exit 69, "seeded bug
# does not apply"). A kind that changes nothing and still "verifies" (exit
# 0) fails the sweep, as does any other outcome. Plans the rank count does
# not allow (they fail without a bug) are skipped and counted.
#   seed_bug_sweep.sh NNS_BINARY [EXAMPLE.nns...]
set -uo pipefail
NNS="$1"
shift
cd "$(dirname "$0")/../.."
files=("$@")
[ ${#files[@]} -eq 0 ] && files=(examples/*.nns)
# The kinds, from nns itself, so a new kind is swept without editing here.
kinds=$("$NNS" check examples/01_mlp.nns --plan dp --gpus 2 --seed-bug '?' 2>&1 | sed -n 's/.*--seed-bug must be one of //p' | tr -d ',')
[ -z "$kinds" ] && { echo "FAIL: could not read the seeded bug kinds"; exit 1; }
fail=0 caught=0 na=0 skipped=0
for f in "${files[@]}"; do
  plans=$("$NNS" check "$f" 2>&1 | sed -n 's/^  plans: *//p' | tr -d ',')
  for ranks in 2 4 4:2; do
    gpus=(--gpus "${ranks%%:*}")
    [[ $ranks == *:* ]] && gpus+=(--plan-gpus "${ranks##*:}")
    for plan in $plans; do
      if ! "$NNS" check "$f" --plan "$plan" "${gpus[@]}" >/dev/null 2>&1; then
        skipped=$((skipped + 1))
        continue
      fi
      for kind in $kinds; do
        out=$("$NNS" check "$f" --plan "$plan" "${gpus[@]}" --seed-bug "$kind" 2>&1)
        rc=$?
        if [ $rc -eq 70 ] && grep -q "^nns: error: program: " <<<"$out" && grep -q "^program: seeded bug (test hook): " <<<"$out"; then
          caught=$((caught + 1))
        elif [ $rc -eq 69 ] && grep -q "seeded bug does not apply" <<<"$out"; then
          na=$((na + 1))
        else
          echo "FAIL: $f $plan on ${gpus[*]}, --seed-bug $kind: exit $rc"
          echo "$out" | tail -3
          fail=1
        fi
      done
    done
  done
done
echo "seeded bugs: $caught caught, $na do not apply, $skipped plan/rank pairs skipped"
[ $fail -eq 0 ] && echo PASS
exit $fail

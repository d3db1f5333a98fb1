#!/usr/bin/env bash
# Device profiles are the one place that names a device: a profile file
# copied into a stdlib (NNS_STDLIB) is listed by nns help, taken by
# --device (simulate, plan) and by --device-memory (check), with no other
# change. A name without a profile is refused with the list.
#   bash tests/planner/device_profiles.sh build/nns
set -u
NNS=${1:-build/nns}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail=0
cp -r stdlib "$TMP/stdlib"
sed -e 's/"name": "h200"/"name": "b200"/' -e 's/"memory_bytes": 151397597184/"memory_bytes": 206158430208/' \
  stdlib/profiles/h200.json > "$TMP/stdlib/profiles/b200.json"
export NNS_STDLIB="$TMP/stdlib"
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; cat "$TMP/log"; fail=1; }
"$NNS" help > "$TMP/log" 2>&1
grep -q "^device profiles (.*): a100, b200, cpu, h100, h200, v100" "$TMP/log" && ok "nns help lists b200" || bad "nns help does not list b200"
"$NNS" check tests/checker/cases/memory_preset.nns --plan dp --gpus 2 --device-memory b200 > "$TMP/log" 2>&1
grep -q "of 192 GiB (b200)" "$TMP/log" && ok "--device-memory b200: 192 GiB" || bad "--device-memory b200"
"$NNS" simulate examples/gpt.nns --plan dp --gpus 2 --config tiny --device b200 > "$TMP/log" 2>&1
grep -q "simulated dp on 2 x b200" "$TMP/log" && ok "simulate --device b200" || bad "simulate --device b200"
"$NNS" simulate examples/gpt.nns --plan dp --gpus 2 --config tiny > "$TMP/log" 2>&1
[ $? = 64 ] && grep -q "needs --device a100|b200|cpu|h100|h200|v100|PATH.json" "$TMP/log" && ok "simulate's usage lists b200" || bad "simulate usage"
"$NNS" check tests/checker/cases/memory_preset.nns --plan dp --gpus 2 --device-memory a100-40g > "$TMP/log" 2>&1
[ $? = 64 ] && grep -q "or a device profile (a100, b200, cpu, h100, h200, v100)" "$TMP/log" && ok "a100-40g: no profile, refused" || bad "a100-40g"
[ $fail = 0 ] && echo "device profiles: all ok"
exit $fail

#!/usr/bin/env bash
# Device profiles (--device PATH.json) that are not sane are refused with a
# message naming the field, exit 64: no inf peak, an fp32 peak present,
# efficiencies at most 1 (up to measurement noise), whole devices per node
# and thread counts in range, no NUL byte, no bad escape.
#   cli_bad_profiles.sh NNS_BINARY
set -uo pipefail
NNS="$1"
cd "$(dirname "$0")/.."
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
base=stdlib/profiles/a100.json
n=0
expect() {  # MESSAGE SED-EXPRESSION
  local msg=$1 expr=$2 f
  n=$((n + 1)); f="$tmp/p$n.json"
  sed "$expr" "$base" > "$f"
  if cmp -s "$f" "$base"; then echo "FAIL: the edit '$expr' changed nothing"; fail=1; return; fi
  local out rc
  out=$(timeout 20 "$NNS" simulate examples/01_mlp.nns --plan dp --gpus 2 --device "$f" 2>&1); rc=$?
  if [ "$rc" != 64 ] || ! grep -qF -- "$msg" <<<"$out"; then
    echo "FAIL: profile with '$expr': exit $rc (want 64), output:"; echo "$out" | tail -3 | sed 's/^/    /'; fail=1
  fi
}
out=$("$NNS" simulate examples/01_mlp.nns --plan dp --gpus 2 --device "$base" 2>&1) || { echo "FAIL: the base profile is refused: $out"; fail=1; }
expect 'number overflow parsing' 's/"fp32": [0-9.e]*/"fp32": 1e999/'
expect 'must give "fp32"' 's/"fp32": /"fp64": /'
expect 'at most 1' 's/\[\([0-9.e]*\), 0\.[0-9]*\]/[\1, 1.5]/'
expect '"devices_per_node" must be a whole number' 's/"devices_per_node": [0-9]*/"devices_per_node": 1.5/'
expect '"devices_per_node" must be a whole number' 's/"devices_per_node": [0-9]*/"devices_per_node": 2147483648/'
expect '"devices_per_node" must be a whole number' 's/"devices_per_node": [0-9]*/"devices_per_node": 1e300/'
expect '"threads" must be a whole number' 's/"devices_per_node": /"threads": 1e300, "devices_per_node": /'
expect 'a NUL byte' 's/"name": "a100"/"name": "a\x00100"/'
expect 'must not contain control characters' 's/"name": "a100"/"name": "a\\u0000100"/'
expect 'forbidden character after backslash' 's/"name": "a100"/"name": "a\\q100"/'
exit $fail

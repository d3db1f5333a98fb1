#!/usr/bin/env bash
# nns plan under constraint tables that allow no plan of the space: exit 65
# with a message that blames the tables, not the memory capacity.
#   constraint_tables.sh NNS_BINARY
set -uo pipefail
NNS="$1"
cd "$(dirname "$0")/../.."
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cp examples/gpt.nns "$TMP/g.nns"
cat >> "$TMP/g.nns" <<'PLAN'
plan no_count_fits(ngpus) {
  split_counts(select(kind = "attention"), [3], name = "three parts on four devices")
  replicate(unassigned(), 0..ngpus)
}
PLAN
out=$("$NNS" plan "$TMP/g.nns" --config tiny --gpus 4 --device a100 --plan no_count_fits 2>&1); rc=$?
if [ $rc != 65 ] || ! grep -qF "no plan found: the constraint tables allow no plan of the space on 4 devices" <<<"$out"; then
  echo "FAIL: tables that allow nothing: exit $rc"; echo "$out" | tail -3; exit 1
fi
echo "PASS: tables that allow no plan are named"

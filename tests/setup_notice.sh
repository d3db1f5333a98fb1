#!/usr/bin/env bash
# Setup phases that run long say what they do (driver/setup_notice.h):
#   - NNS_SETUP_NOTICE=0 (every phase "long"): nns check --plan names the
#     elaboration and the plan check, each with "done in";
#   - piped and without the variable (the golden tests' case): nothing on stderr;
#   - a malformed NNS_SETUP_NOTICE is a usage error naming it (exit 64).
#   setup_notice.sh NNS_BINARY
set -euo pipefail
NNS="$1"
cd "$(dirname "$0")/.."
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
args=(check examples/gpt.nns --config tiny --plan megatron --gpus 2)
NNS_SETUP_NOTICE=0 "$NNS" "${args[@]}" > /dev/null 2> "$tmp/on.err" || fail "check failed: $(cat "$tmp/on.err")"
err=$(cat "$tmp/on.err")
grep -q "^nns: elaborating examples/gpt.nns (config tiny) \.\.\.$" <<< "$err" || fail "no elaboration notice: $err"
grep -q "^nns: elaborating examples/gpt.nns (config tiny): done in [0-9.]* s$" <<< "$err" || fail "no elaboration end: $err"
grep -q "^nns: checking plan megatron on 2 device(s) (Z3, then program verification) \.\.\.$" <<< "$err" || fail "no check notice: $err"
"$NNS" "${args[@]}" > /dev/null 2> "$tmp/off.err" || fail "check failed: $(cat "$tmp/off.err")"
[ ! -s "$tmp/off.err" ] || fail "notices on a pipe without NNS_SETUP_NOTICE: $(cat "$tmp/off.err")"
rc=0
NNS_SETUP_NOTICE=soon "$NNS" "${args[@]}" > /dev/null 2> "$tmp/bad.err" || rc=$?
[ "$rc" = 64 ] && grep -q "NNS_SETUP_NOTICE='soon'" "$tmp/bad.err" || fail "a bad NNS_SETUP_NOTICE: exit $rc, $(cat "$tmp/bad.err")"
echo "PASS: setup notices"

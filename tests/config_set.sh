#!/usr/bin/env bash
# nns run/check --set KEY=VALUE: overrides a config entry with the type the
# file gives it; entries computed from it follow; an unknown key names the
# nearest entry; a value of the wrong type or a malformed --set is exit 65.
#   config_set.sh NNS_BINARY
set -euo pipefail
NNS="$1"
cd "$(dirname "$0")/.."
fail() { echo "FAIL: $*"; exit 1; }

# steps (int) and lr (float): the run takes them.
out=$("$NNS" run examples/gpt.nns --config tiny --set steps=4 --set lr=0.01)
grep -q "^done: 4 steps" <<< "$out" || fail "--set steps=4 did not run 4 steps: $out"
base=$("$NNS" run examples/gpt.nns --config tiny --steps 2 | sed -n 's/^step *2\/2  loss \([0-9.]*\).*/\1/p')
lr=$("$NNS" run examples/gpt.nns --config tiny --steps 2 --set lr=0.01 | sed -n 's/^step *2\/2  loss \([0-9.]*\).*/\1/p')
[ -n "$base" ] && [ "$base" != "$lr" ] || fail "--set lr=0.01 changed nothing ($base vs $lr)"
# An int given to a float entry is a float; the parameter count follows vocab.
"$NNS" check examples/gpt.nns --config tiny --set lr=1 > /dev/null || fail "--set lr=1 refused"
p256=$("$NNS" check examples/gpt.nns --config tiny | sed -n 's/.*parameters: *[0-9.]*K (\([0-9]*\)).*/\1/p')
p512=$("$NNS" check examples/gpt.nns --config tiny --set vocab=512 | sed -n 's/.*parameters: *[0-9.]*K (\([0-9]*\)).*/\1/p')
[ "$((p512 - p256))" = "$((256 * 64))" ] || fail "--set vocab=512: parameters $p256 -> $p512, expected +16384 (the tied embedding)"
# A derived config (tiny_pipe extends tiny) takes the override too.
"$NNS" run examples/gpt.nns --config tiny_pipe --set steps=1 | grep -q "^done: 1 steps" || fail "--set on a derived config"

expect_error() {  # expect_error MESSAGE ARGS...
  local want="$1"; shift
  local rc=0; "$NNS" "$@" > /dev/null 2> /tmp/config_set_err.$$ || rc=$?
  [ "$rc" = 65 ] && grep -qF -- "$want" /tmp/config_set_err.$$ || { cat /tmp/config_set_err.$$; rm -f /tmp/config_set_err.$$; fail "$*: exit $rc, expected 65 and '$want'"; }
  rm -f /tmp/config_set_err.$$
}
expect_error "config 'tiny' has no entry 'setps'; did you mean 'steps'?" run examples/gpt.nns --config tiny --set setps=3
expect_error "config 'tiny' has no entry 'zzzzzzzz'" check examples/gpt.nns --config tiny --set zzzzzzzz=1
expect_error "--set steps=4.5: 'steps' is an int" run examples/gpt.nns --config tiny --set steps=4.5
expect_error "--set lr=fast: 'lr' is a float" check examples/gpt.nns --config tiny --set lr=fast
expect_error "--set needs KEY=VALUE (got 'steps')" check examples/gpt.nns --config tiny --set steps
expect_error "--set steps is given twice" check examples/gpt.nns --config tiny --set steps=1 --set steps=2
echo "PASS"

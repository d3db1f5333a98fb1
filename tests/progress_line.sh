#!/usr/bin/env bash
# The progress on a terminal (run under script(1), which gives it a pty):
# one line redrawn with carriage returns, carrying the ETA, validation losses
# on lines of their own, and the summary on a fresh line. Piped, the same run
# prints one full line per step and no carriage return.
#   progress_line.sh NNS_BINARY
set -euo pipefail
NNS=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
cd "$(dirname "$0")/.."
fail() { echo "FAIL: $*"; exit 1; }
command -v script > /dev/null || { echo "SKIP: script(1) is not installed (util-linux)"; echo PASS; exit 0; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
sed "s|  data = synthetic(seed = 1)|  data = synthetic(seed = 1)\n  val_data = synthetic(seed = 7)\n  eval_every = 3|" examples/gpt.nns > "$tmp/g.nns"

piped=$("$NNS" run "$tmp/g.nns" --config tiny --steps 6)
[ "$(grep -c '^step ' <<< "$piped")" = 6 ] || fail "piped: expected 6 step lines: $piped"
grep -q $'\r' <<< "$piped" && fail "piped output holds a carriage return"

script -qec "'$NNS' run '$tmp/g.nns' --config tiny --steps 6" /dev/null > "$tmp/tty.txt" < /dev/null || fail "under a terminal: $(cat "$tmp/tty.txt")"
tty=$(tr -d '\033' < "$tmp/tty.txt")
[ "$(grep -o $'\r''step [0-9]*/6' <<< "$tty" | wc -l)" = 6 ] || fail "expected 6 redraws of the line: $(cat -v "$tmp/tty.txt")"
grep -q 'step 6/6 (100%)  loss [0-9.]*  lr 0  .* tokens/s  ETA 0s  peak ' <<< "$tty" || fail "no final progress line: $(cat -v "$tmp/tty.txt")"
grep -q '^step ' <<< "$(tr '\r' '\n' <<< "$tty" | grep -v '^step [0-9]*/6 (')" && fail "a full step line on a terminal: $(cat -v "$tmp/tty.txt")"
[ "$(grep -c '^  validation loss ' <<< "$(tr '\r' '\n' <<< "$tty")")" = 2 ] || fail "the validation losses are not on lines of their own: $(cat -v "$tmp/tty.txt")"
grep -q '^done: 6 steps' <<< "$(tr '\r' '\n' <<< "$tty")" || fail "the summary is not on a line of its own: $(cat -v "$tmp/tty.txt")"
echo PASS

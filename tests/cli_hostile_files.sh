#!/usr/bin/env bash
# Hostile paths where nns reads or writes files: a FIFO with no writer, a
# device node, a missing folder. Each ends at once with a message and exit
# 64/65, never a hang (every command runs under a 20 s timeout), and a
# device node is never replaced by an output.
#   cli_hostile_files.sh NNS_BINARY
set -uo pipefail
NNS="$1"
cd "$(dirname "$0")/.."
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkfifo "$tmp/fifo"
expect() {  # EXIT MESSAGE ARGS...
  local want=$1 msg=$2
  shift 2
  local out rc
  out=$(timeout 20 "$NNS" "$@" 2>&1); rc=$?
  if [ "$rc" != "$want" ] || ! grep -qF -- "$msg" <<<"$out"; then
    echo "FAIL: nns $*: exit $rc (want $want), output:"; echo "$out" | tail -3 | sed 's/^/    /'; fail=1
  fi
}
# Model files.
expect 65 "cannot read file '$tmp/fifo' (not a regular file (a FIFO))" check "$tmp/fifo"
expect 65 "cannot read file '/dev/zero' (not a regular file (a character device))" check /dev/zero
# Device profiles.
expect 64 "cannot read device profile '$tmp/fifo': not a regular file (a FIFO)" simulate examples/01_mlp.nns --plan dp --gpus 2 --device "$tmp/fifo"
expect 64 "cannot read device profile '/dev/urandom': not a regular file" simulate examples/01_mlp.nns --plan dp --gpus 2 --device /dev/urandom
# Save targets, checked before the first step.
expect 64 "--save /dev/full: '/dev/full' exists and is neither a regular file nor a folder" run examples/01_mlp.nns --steps 1 --save /dev/full
[ -c /dev/full ] || { echo "FAIL: /dev/full is no longer a device"; fail=1; }
expect 64 "--save $tmp/fifo: '$tmp/fifo' exists and is neither a regular file nor a folder" run examples/01_mlp.nns --steps 1 --save "$tmp/fifo"
expect 64 "the folder '$tmp/missing' does not exist" run examples/01_mlp.nns --steps 1 --save "$tmp/missing/ck"
# A checkpoint whose shard is a link to /dev/zero: refused, not read forever.
if "$NNS" run examples/01_mlp.nns --plan dp --gpus 2 --steps 1 --save "$tmp/ck" > /dev/null 2>&1; then
  shard=$(ls "$tmp"/ck/step-*/rank-1.safetensors)
  rm "$shard" && ln -s /dev/zero "$shard"
  expect 65 "rank-1.safetensors: not a regular file" ckpt merge "$tmp/ck" -o "$tmp/merged.safetensors"
else
  echo "FAIL: the sharded save to set up the /dev/zero shard case failed"; fail=1
fi
# A 100 MB line to the REPL: refused at once (it held the REPL for minutes),
# and the session goes on with the next line.
head -c 100000000 /dev/zero | tr '\0' x > "$tmp/long_line"
{ echo "let a = 1"; cat "$tmp/long_line"; printf '\nprint(a + 1)\n'; } > "$tmp/repl_input"
out=$(timeout 30 "$NNS" repl examples/01_mlp.nns < "$tmp/repl_input" 2>&1); rc=$?
if [ $rc != 65 ] || ! grep -qF "input line longer than 1048576 bytes" <<<"$out" || ! grep -qx "2" <<<"$out"; then
  echo "FAIL: a 100 MB REPL line: exit $rc"; echo "$out" | cut -c1-200 | tail -3; fail=1
fi
rm -f "$tmp/long_line" "$tmp/repl_input"
exit $fail

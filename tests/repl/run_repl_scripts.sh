#!/usr/bin/env bash
# Scripted REPL sessions through a pipe, compared with expected output.
# Each scripts/NAME.repl starts with "# args: ..." (the nns repl arguments);
# scripts/NAME.expected is its output (stdout and stderr, then "exit: N"),
# with the source folder written as <src>. UPDATE=1 rewrites the expected
# files from the current output.
#   bash tests/repl/run_repl_scripts.sh build/nns      (from the source folder)
set -u
nns="$1"
here="$(cd "$(dirname "$0")" && pwd)"
src="$(cd "$here/../.." && pwd)"
cd "$src"
failed=0
total=0
for script in "$here"/scripts/*.repl; do
  name="$(basename "$script" .repl)"
  expected="$here/scripts/$name.expected"
  args="$(head -n 1 "$script" | sed -n 's/^# args: //p')"
  # shellcheck disable=SC2086
  actual="$(NO_COLOR=1 "$nns" repl $args < "$script" 2>&1; echo "exit: $?")"
  actual="${actual//$src/<src>}"
  total=$((total + 1))
  if [ "${UPDATE:-0}" = 1 ]; then
    printf '%s\n' "$actual" > "$expected"
    continue
  fi
  if ! diff -u "$expected" <(printf '%s\n' "$actual") > /tmp/nns_repl_diff_$$; then
    echo "FAIL $name"
    cat /tmp/nns_repl_diff_$$
    failed=$((failed + 1))
  fi
done
rm -f /tmp/nns_repl_diff_$$
echo "repl scripts: $((total - failed))/$total passed"
[ "$failed" -eq 0 ]

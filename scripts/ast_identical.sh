#!/usr/bin/env bash
# Checks that two nns binaries read the language the same: for every .nns file under examples/, stdlib/ and
# tests/, `nns check FILE --emit=ast` must print the same stdout and stderr and exit with the same code under both
# (files with syntax errors then keep their diagnostics too). With --check, the files of tests/errors are also run
# through a whole `nns check` with their '# args:' line, comparing all diagnostics.
# Usage: scripts/ast_identical.sh BEFORE_NNS AFTER_NNS [--check]   (run from anywhere inside the repository)
# Prints each file that differs (with a diff) and a count; exits 1 if any differs.
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: $0 BEFORE_NNS AFTER_NNS [--check]" >&2; exit 2; }
before=$(realpath "$1") after=$(realpath "$2") full=${3:-}
cd "$(git rev-parse --show-toplevel)" || exit 2
export NO_COLOR=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
same=0 differ=0 parsed=0
run() {  # run NAME BINARY ARGS...: stdout, stderr and exit code into $tmp/NAME
  local name=$1 bin=$2
  shift 2
  timeout 60 "$bin" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
  echo "exit $?" >>"$tmp/$name.err"
}
compare() {  # compare LABEL ARGS...
  local label=$1
  shift
  run a "$before" "$@"
  run b "$after" "$@"
  if cmp -s "$tmp/a.out" "$tmp/b.out" && cmp -s "$tmp/a.err" "$tmp/b.err"; then
    same=$((same + 1))
  else
    differ=$((differ + 1))
    echo "DIFFERS ($label): $*"
    diff "$tmp/a.out" "$tmp/b.out" | head -20
    diff "$tmp/a.err" "$tmp/b.err" | head -20
  fi
}
while IFS= read -r f; do
  compare ast check "$f" --emit=ast
  grep -q '^exit 0$' "$tmp/a.err" && parsed=$((parsed + 1))
done < <(find examples stdlib tests -name '*.nns' | sort)
if [ "$full" = --check ]; then
  for f in tests/errors/*.nns; do
    extra=()
    read -r -a extra < <(grep -o '# args: .*' "$f" | head -1 | sed 's/^# args: //')
    compare check check "$f" "${extra[@]}"
  done
fi
echo "ast_identical: $same identical, $differ differ ($parsed files printed an AST with exit 0)"
[ "$differ" = 0 ]

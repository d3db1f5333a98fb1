#!/usr/bin/env bash
# The documentation's commands run: every line of every ```sh block in
# README.md and docs/*.md is run from the repository root with `nns` meaning
# the built binary, and must exit 0 (or the code a trailing `# exit N`
# names) within 120 s. Lines that call scripts/ are the two top-level
# commands (CI runs scripts/test.sh itself; scripts/main_job.sh trains
# several models): they are checked to exist, not run. A block that should
# not run uses another fence (```text, ```python).
#   doc_commands.sh NNS_BINARY
set -uo pipefail
NNS=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
cd "$(dirname "$0")/.."
fail=0 ran=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for doc in README.md docs/*.md; do
  in_block=0 lineno=0
  while IFS= read -r line || [ -n "$line" ]; do
    lineno=$((lineno + 1))
    if [ $in_block = 0 ]; then
      [[ "$line" =~ ^\`\`\`sh[[:space:]]*$ ]] && in_block=1
      continue
    fi
    if [[ "$line" =~ ^\`\`\` ]]; then in_block=0; continue; fi
    cmd="${line%%#*}"                        # a trailing comment is not part of the command
    [[ "$cmd" =~ ^[[:space:]]*$ ]] && continue
    want=0
    [[ "$line" =~ \#\ exit\ ([0-9]+) ]] && want=${BASH_REMATCH[1]}
    if [[ "$cmd" =~ ^[[:space:]]*scripts/([^[:space:]]+) ]]; then
      [ -x "scripts/${BASH_REMATCH[1]}" ] || { echo "FAIL: $doc:$lineno: scripts/${BASH_REMATCH[1]} does not exist"; fail=1; }
      continue
    fi
    ran=$((ran + 1))
    rc=0
    NNS_BIN="$NNS" timeout 120 bash -c 'nns() { "$NNS_BIN" "$@"; }; export -f nns; '"$cmd" > "$log" 2>&1 || rc=$?
    if [ "$rc" != "$want" ]; then
      echo "FAIL: $doc:$lineno: exit $rc (want $want): $cmd"
      tail -5 "$log" | sed 's/^/    /'
      fail=1
    else
      echo "ok: $doc:$lineno: $cmd"
    fi
  done < "$doc"
done
[ $ran -gt 0 ] || { echo "FAIL: no command found"; exit 1; }
[ $fail = 0 ] && echo "PASS: $ran documented command(s) ran"
exit $fail

#!/usr/bin/env bash
# Runs the .nns file tests. usage: run_lang_tests.sh KIND NNS_BINARY
#   errors  tests/errors/*.nns   each file states its diagnostics inline:
#             # error: L:C: message      (an error expected at line L, column C)
#             # exit: N                  (expected exit code, default 65)
#             # args: ARGS               (more arguments of `nns check`, e.g.
#                                          --plan P --gpus 4 for a plan's errors)
#           `nns check` must exit with that code and print exactly those
#           errors (message text must match as a substring at file:L:C).
#   lang    tests/lang/*.nns     `# expect: TEXT` lines, in order, must equal
#           the lines the program prints (print() output); exit code 0.
#   golden  tests/golden/*.nns   compares `nns check --emit=E` with NAME.E for
#           every NAME.E file beside it (E = tokens, ast, graph). Set
#           UPDATE_GOLDEN=1 to rewrite the expected files.
#           tests/golden/*.cmd   the same for `nns check ARGS --emit=E`, ARGS
#           the file's one line (e.g. a shipped example and its plan), for
#           every NAME.E beside it (E = any --emit stage: plan, comm, ...).
set -u
kind=$1
nns=$2
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/.." || exit 1
export NO_COLOR=1
fail=0
count=0

check_errors() {
  local f=$1 expected_exit=65
  local want
  want=$(grep -o '# exit: [0-9]*' "$f" | head -1 | awk '{print $3}')
  [ -n "$want" ] && expected_exit=$want
  local extra=()
  read -r -a extra < <(grep -o '# args: .*' "$f" | head -1 | sed 's/^# args: //')
  local out rc
  out=$("$nns" check "$f" "${extra[@]}" 2>&1 >/dev/null); rc=$?
  if [ "$rc" != "$expected_exit" ]; then
    echo "FAIL $f: exit $rc, expected $expected_exit"; echo "$out" | sed 's/^/    /'; return 1
  fi
  local n_expected=0 ok=0
  while IFS= read -r line; do
    local spec=${line#*# error: }
    local lc=${spec%%: *} msg=${spec#*: }
    n_expected=$((n_expected + 1))
    if ! grep -qF -- "$f:$lc: error: " <<<"$out" || ! grep -F -- "$f:$lc: error: " <<<"$out" | grep -qF -- "$msg"; then
      echo "FAIL $f: missing error at $lc: $msg"; echo "$out" | sed 's/^/    /'; ok=1
    fi
  done < <(grep '# error: ' "$f")
  local n_actual
  n_actual=$(grep -c ': error: ' <<<"$out")
  if [ "$n_expected" = 0 ]; then echo "FAIL $f: no '# error:' expectation in the file"; return 1; fi
  if [ "$n_actual" != "$n_expected" ]; then
    echo "FAIL $f: $n_actual errors printed, $n_expected expected"; echo "$out" | sed 's/^/    /'; ok=1
  fi
  # Every error must quote the source line with a caret under it.
  if [ "$expected_exit" = 65 ] && ! grep -q '^ *\^' <<<"$out"; then
    echo "FAIL $f: no caret line in the diagnostic"; ok=1
  fi
  return $ok
}

check_lang() {
  local f=$1 out rc
  out=$("$nns" check "$f" 2>&1); rc=$?
  if [ $rc != 0 ]; then echo "FAIL $f: exit $rc"; echo "$out" | sed 's/^/    /'; return 1; fi
  local expected actual
  expected=$(grep '# expect: ' "$f" | sed 's/.*# expect: //')
  [ -z "$expected" ] && { echo "FAIL $f: no '# expect:' line"; return 1; }
  actual=$(grep -v -e '^  ' -e "^$f" <<<"$out")
  if [ "$expected" != "$actual" ]; then
    echo "FAIL $f: output differs"; diff <(echo "$expected") <(echo "$actual") | sed 's/^/    /'; return 1
  fi
}

check_golden() {
  local f=$1 base=${1%.nns} ok=0 any=0
  for e in tokens ast graph program; do
    [ -f "$base.$e" ] || continue
    any=1
    local args=(check "$f" "--emit=$e")
    local cfg
    cfg=$(grep -o '# config: [a-z0-9_]*' "$f" | head -1 | awk '{print $3}')
    [ -n "$cfg" ] && args+=(--config "$cfg")
    if [ "${UPDATE_GOLDEN:-}" = 1 ]; then "$nns" "${args[@]}" > "$base.$e"; continue; fi
    if ! diff -u "$base.$e" <("$nns" "${args[@]}" 2>&1) > /tmp/nns_golden_diff.$$; then
      echo "FAIL $f --emit=$e differs from $base.$e:"; head -40 /tmp/nns_golden_diff.$$ | sed 's/^/    /'; ok=1
    fi
    rm -f /tmp/nns_golden_diff.$$
  done
  [ $any = 1 ] || { echo "FAIL $f: no golden file beside it"; return 1; }
  return $ok
}

# A .cmd golden: the arguments of `nns check` on one line, NAME.E beside it.
check_golden_cmd() {
  local f=$1 base=${1%.cmd} ok=0 any=0 args
  read -r -a args < "$f"
  for e in tokens ast graph plan comm program schedule training-graph; do
    [ -f "$base.$e" ] || continue
    any=1
    if [ "${UPDATE_GOLDEN:-}" = 1 ]; then "$nns" check "${args[@]}" "--emit=$e" > "$base.$e"; continue; fi
    if ! diff -u "$base.$e" <("$nns" check "${args[@]}" "--emit=$e" 2>&1) > /tmp/nns_golden_diff.$$; then
      echo "FAIL $f --emit=$e differs from $base.$e:"; head -40 /tmp/nns_golden_diff.$$ | sed 's/^/    /'; ok=1
    fi
    rm -f /tmp/nns_golden_diff.$$
  done
  [ $any = 1 ] || { echo "FAIL $f: no golden file beside it"; return 1; }
  return $ok
}

if [ "$kind" = golden ]; then
  for f in tests/golden/*.cmd; do
    [ -e "$f" ] || continue
    count=$((count + 1))
    check_golden_cmd "$f" || fail=$((fail + 1))
  done
fi

for f in tests/$kind/*.nns; do
  [ -e "$f" ] || continue
  count=$((count + 1))
  case $kind in
    errors) check_errors "$f" || fail=$((fail + 1)) ;;
    lang) check_lang "$f" || fail=$((fail + 1)) ;;
    golden) check_golden "$f" || fail=$((fail + 1)) ;;
  esac
done
echo "$kind: $((count - fail))/$count passed"
[ $count -gt 0 ] && [ $fail = 0 ]

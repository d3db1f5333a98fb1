# Sourced by the shell tests that run one nns command twice, with an
# environment setting that turns a mechanism off and without it, and expect
# the same output (check_threads.sh, kernel_cache.sh, rank_symmetry.sh).
# The sourcing script sets NNS and fail=0 and defines `masked`, which takes
# out of an output what may differ between the runs (times; and runs of
# spaces collapsed, since a column padded to a figure's width moves).

# same_under SETTING LABEL ARGS...: runs "$NNS" ARGS with SETTING
# (VAR=VALUE) and without it; reports a failure (fail=1) when the masked
# outputs differ, when the output is empty, or when the exit codes differ
# or (unless SAME_ANY_EXIT=1) are not 0. Leaves the unmasked output of the
# run without SETTING in `raw`.
same_under() {
  local setting="$1" label="$2"
  shift 2
  local base out rc1 rc2
  base="$(env "$setting" "$NNS" "$@" 2>&1)"
  rc1=$?
  raw="$("$NNS" "$@" 2>&1)"
  rc2=$?
  base="$(masked <<<"$base")"
  out="$(masked <<<"$raw")"
  if [ "$rc1" -ne "$rc2" ] || { [ "${SAME_ANY_EXIT:-0}" != 1 ] && [ "$rc1" -ne 0 ]; } || [ "$base" != "$out" ]; then
    echo "FAIL: $label: exit $rc1 with $setting, $rc2 without, or the outputs differ:"
    diff <(echo "$base") <(echo "$out") | head -10
    fail=1
  fi
  if [ -z "$out" ]; then
    echo "FAIL: $label printed nothing"
    fail=1
  fi
}

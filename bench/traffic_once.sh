#!/usr/bin/env bash
# Bytes moved per training step by the shipped pipelined plans (issue 26,
# item 3: traffic once), three ways: the lowered programs (`check
# --emit=program`: every rank's sends and collectives, summed), what the
# ranks really issue in one step (NNS_COMM_TRACE at the Communicator, `run
# --steps 1`), and, where the binary prints it, `--emit=comm`'s step total
# (the volume model). Run it with two binaries to compare before and after.
#   bench/traffic_once.sh [NNS_BINARY]     (default build/nns)
# One line per case: file, config, plan, ranks; sends and their bytes per
# step from the programs, the same from the runtime trace, collective
# launches (not sends) per step, and the --emit=comm step total.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NNS="${1:-$ROOT/build/nns}"
cd "$ROOT"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

mapfile -t cases < <(grep -v '^#' bench/traffic_cases.txt)
printf '%-24s %-10s %-12s %5s | %6s %10s | %6s %10s | %6s | %s\n' file config plan ranks sends bytes t.sends t.bytes colls "emit=comm step total"
for c in "${cases[@]}"; do
  read -r file config plan ranks <<< "$c"
  args=("$file" --config "$config" --plan "$plan" --gpus "$ranks")
  if ! "$NNS" check "${args[@]}" --emit=program > "$tmp/prog.txt" 2> "$tmp/err.txt"; then
    echo "$file $plan: check --emit=program failed: $(tail -1 "$tmp/err.txt")"
    continue
  fi
  # Program lines: "  mbK send bN count C to rank R ..." and collectives.
  read -r sends bytes colls < <(awk '
    $2 == "send" { for (i = 1; i <= NF; i++) if ($i == "count") b += 4 * $(i + 1); s++ }
    $2 ~ /^(allreduce|allgather|reduce-scatter|all-to-all|bucket-allreduce|replica-average)$/ { n++ }
    END { print s + 0, b + 0, n + 0 }' "$tmp/prog.txt")
  rm -f "$tmp"/trace.*
  if NNS_COMM_TRACE="$tmp/trace" "$NNS" run "${args[@]}" --steps 1 > "$tmp/run.txt" 2>&1; then
    read -r tsends tbytes < <(cat "$tmp"/trace.rank-* | awk '$1 == "send" { s++; b += 4 * $2 } END { print s + 0, b + 0 }')
  else
    tsends=fail tbytes="$(tail -1 "$tmp/run.txt")"
  fi
  comm="$("$NNS" check "${args[@]}" --emit=comm 2>/dev/null)"
  step="$(printf '%s\n' "$comm" | sed -n 's/^  per step of \([0-9]*\) micro-batches: \([0-9]*\) collective(s), \([0-9]*\) bytes.*/\3 B (\2 launches, \1 mb)/p')"
  [ -n "$step" ] || step="$(printf '%s\n' "$comm" | sed -n 's/^  total: \([0-9]*\) collective(s).*, \([0-9]*\) bytes by.*/\2 B per mb-edge (\1 launches; no step total)/p')"
  printf '%-24s %-10s %-12s %5s | %6s %10s | %6s %10s | %6s | %s\n' "$(basename "$file")" "$config" "$plan" "$ranks" "$sends" "$bytes" \
    "$tsends" "$tbytes" "$colls" "$step"
done

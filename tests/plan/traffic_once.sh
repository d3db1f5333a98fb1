#!/usr/bin/env bash
# Traffic once (issue 26, item 3) on gpt's 1F1B plan over 2 ranks, 4
# micro-batches (examples/gpt.nns, tiny_pipe, plan pipeline):
# - `--emit=comm` lists each activation's transfer across the stage
#   boundary once (the residual stream %69 feeds two ops of stage 1: one
#   transfer forward, the two gradient shares summed into one backward), and
#   the tied weight wte's transfer and its gradient's as once per step;
#   the step total is 4 x 2 activation transfers + 2 weight transfers.
# - The programs (`check --emit=program`) send exactly that: per rank one
#   activation (or gradient) per micro-batch and wte (or its gradient) once.
# - The ranks issue exactly those sends (NNS_COMM_TRACE) and the run matches
#   one device (--verify).
#   traffic_once.sh NNS_BINARY
set -uo pipefail
NNS="$1"
cd "$(dirname "$0")/../.."
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail=0
args=(examples/gpt.nns --config tiny_pipe --plan pipeline --gpus 2)

if ! comm="$("$NNS" check "${args[@]}" --emit=comm 2> "$tmp/err")"; then
  echo "FAIL: check --emit=comm: $(tail -1 "$tmp/err")"
  exit 1
fi
# One forward and at most one backward entry per activation tensor.
dups="$(printf '%s\n' "$comm" | awk '/^  (forward|backward grad) %[0-9]+ f32/ { k = $1 " " ($1 == "forward" ? $2 : $3); n[k]++ }
  END { for (k in n) if (n[k] > 1) print k " listed " n[k] " times" }')"
if [ -n "$dups" ]; then
  echo "FAIL: a tensor crosses the stage boundary more than once per micro-batch:"
  echo "$dups"
  fail=1
fi
acts="$(printf '%s\n' "$comm" | grep -cE '^  forward %[0-9]+ f32')"
[ "$acts" = 1 ] || { echo "FAIL: expected one activation transfer forward, found $acts"; fail=1; }
shared="$(printf '%s\n' "$comm" | grep -E '^  forward %[0-9]+ f32' || true)"
case "$shared" in
  *" + "*"(one transfer)"*) ;;
  *) echo "FAIL: the residual stream's two consumers on stage 1 are not listed as one transfer: $shared"; fail=1 ;;
esac
for dir in "forward %0(wte)" "backward grad %0(wte)"; do
  line="$(printf '%s\n' "$comm" | grep -F "  $dir " || true)"
  case "$line" in
    *"(once per step)"*) ;;
    *) echo "FAIL: $dir is not once per step: '${line}'"; fail=1 ;;
  esac
done
# 4 micro-batches x (8192 floats forward + 8192 back) + 2 x 16384 floats of wte, 4 bytes each.
want_line="  per step of 4 micro-batches: 10 collective(s), 393216 bytes, 393216 of them across device groups"
case "$comm" in
  *"$want_line"*) ;;
  *) echo "FAIL: expected the step total '$want_line' in:"; printf '%s\n' "$comm" | tail -3; fail=1 ;;
esac

# The programs: per rank and micro-batch one send of the activation (rank
# 0) or its gradient (rank 1), and one send of wte (or its gradient) per step.
if ! "$NNS" check "${args[@]}" --emit=program > "$tmp/prog" 2> "$tmp/err"; then
  echo "FAIL: check --emit=program: $(tail -1 "$tmp/err")"
  exit 1
fi
sends="$(awk '/^program rank / { r = $3 } $2 == "send" {
    what = ($0 ~ /wte/) ? "wte" : "act"
    n[r " " $1 " " what]++; total[r " " what]++; bytes += 4 * $5 }
  END {
    for (k in n) if (n[k] > 1) print "rank/mb/kind " k ": " n[k] " sends"
    printf "r0 act %d wte %d r1 act %d wte %d bytes %d\n", total["0 act"], total["0 wte"], total["1 act"], total["1 wte"], bytes }' "$tmp/prog")"
want_sends="r0 act 4 wte 1 r1 act 4 wte 1 bytes 393216"
[ "$sends" = "$want_sends" ] || { echo "FAIL: program sends: got '$sends', want '$want_sends'"; fail=1; }

# What the ranks issue in one step, and the losses against one device.
rm -f "$tmp"/trace.*
if ! NNS_COMM_TRACE="$tmp/trace" "$NNS" run "${args[@]}" --steps 2 --verify > "$tmp/run" 2>&1; then
  echo "FAIL: run --verify:"; tail -5 "$tmp/run"; fail=1
fi
traced="$(cat "$tmp"/trace.rank-* 2>/dev/null | awk '$1 == "send" { s++; b += 4 * $2 } END { printf "%d sends %d bytes\n", s, b }')"
[ "$traced" = "20 sends 786432 bytes" ] || { echo "FAIL: traced over 2 steps: $traced (want 20 sends 786432 bytes)"; fail=1; }

[ "$fail" = 0 ] && echo "PASS: traffic once (gpt 1F1B: one transfer per activation per micro-batch, wte once per step)"
exit "$fail"

#!/usr/bin/env bash
# What runs is what is printed: for shipped plans, `run --emit=program`
# prints the same programs as `check --emit=program`, and the collectives every
# rank issues in one training step, counted at the Communicator
# (NNS_COMM_TRACE), must equal — in number, order, size and group — the
# collectives of that rank's program as `nns check --emit=program` prints it
# (no rank started there). PLAN "-" is a run without --plan: its ranks run
# the implicit data-parallel plan, whose programs are printed the same way.
#   collective_trace.sh NNS_BINARY
set -uo pipefail
NNS="$1"
cd "$(dirname "$0")/../.."
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail=0

# The program's collectives in the trace's format, into $tmp/prog.rank-R.
# Consecutive replica-averages over one group run as one allreduce (the
# replicas' gradient bucket, rank_program.h).
program_collectives() {
  awk -v out="$tmp/prog" '
    function flush() { if (pend_n > 0) print "allreduce " pend_n " " pend_g >> file; pend_n = 0 }
    /^program rank / { flush(); rank = $3; file = out ".rank-" rank; printf "" > file; next }
    {
      prim = $2
      if (prim == "replica-average") {
        for (i = 1; i <= NF; i++) if ($i == "count") { n = $(i + 1); g = $(i + 4) }
        if (pend_n > 0 && g == pend_g) pend_n += n
        else { flush(); pend_n = n; pend_g = g }
        next
      }
      flush()
      if (prim == "send" || prim == "recv") {
        for (i = 1; i <= NF; i++) if ($i == "count") { n = $(i + 1); peer = $(i + 4) }
        print prim " " n " " (prim == "send" ? "to" : "from") " " peer >> file
        next
      }
      if (prim !~ /^(allreduce|allgather|reduce-scatter|all-to-all|bucket-allreduce|replica-average|loss-allreduce)$/) next
      for (i = 1; i <= NF; i++) if ($i == "count") { n = $(i + 1); g = $(i + 4) }
      if (g !~ /,/) next   # a group of one rank communicates nothing
      if (prim ~ /allreduce|replica-average/) prim = "allreduce"
      print prim " " n " " g >> file
    }
    END { flush() }'
}

by_group() {  # FILE: its lines stably sorted by their last field (the group or the peer)
  awk '{ print $NF "\t" $0 }' "$1" | sort -s -t "$(printf '\t')" -k1,1 | cut -f2- > "$1.sorted"
  mv "$1.sorted" "$1"
}

case_() {  # FILE CONFIG PLAN GPUS PLAN_GPUS
  local args=("$1" --config "$2" --plan "$3" --gpus "$4" --plan-gpus "$5")
  [ "$3" = - ] && args=("$1" --config "$2" --gpus "$4")
  rm -f "$tmp"/prog.* "$tmp"/trace.*
  if ! "$NNS" check "${args[@]}" --emit=program > "$tmp/program.txt" 2> "$tmp/err.txt"; then
    echo "FAIL: check --emit=program for $1 $3:"; tail -3 "$tmp/err.txt"; fail=1; return
  fi
  if ! "$NNS" run "${args[@]}" --emit=program 2>&1 | diff -q "$tmp/program.txt" - > /dev/null; then
    echo "FAIL: $1 $3: run --emit=program differs from check --emit=program"; fail=1
  fi
  program_collectives < "$tmp/program.txt"
  if ! NNS_COMM_TRACE="$tmp/trace" "$NNS" run "${args[@]}" --steps 1 > "$tmp/run.txt" 2>&1; then
    echo "FAIL: run of $1 $3:"; tail -3 "$tmp/run.txt"; fail=1; return
  fi
  local total=0
  for ((r = 0; r < $4; r++)); do
    touch "$tmp/prog.rank-$r" "$tmp/trace.rank-$r"
    # Per group (or peer), in order: a posted gradient bucket runs on its
    # group's own thread (group_worker.h), so collectives of different
    # groups may reach the Communicator in another order than the
    # program's; within a group the order is the program's.
    by_group "$tmp/prog.rank-$r"
    by_group "$tmp/trace.rank-$r"
    if ! diff -q "$tmp/prog.rank-$r" "$tmp/trace.rank-$r" > /dev/null; then
      echo "FAIL: $1 $3 on $4 ranks, rank $r: the collectives issued differ from the program's:"
      diff "$tmp/prog.rank-$r" "$tmp/trace.rank-$r" | head -6; fail=1
    fi
    total=$((total + $(wc -l < "$tmp/trace.rank-$r")))
  done
  [ "$total" -gt 0 ] || { echo "FAIL: $1 $3: no collective traced at all"; fail=1; }
  echo "$1 $3 on $4 ranks: $total collective call(s) match the programs"
}

case_ examples/gpt.nns tiny dp 2 2
case_ examples/gpt.nns tiny - 2 1
case_ examples/swin.nns tiny - 3 1
case_ examples/gpt.nns tiny megatron 2 2
case_ examples/gpt.nns tiny hybrid 4 4
case_ examples/gpt.nns tiny megatron 4 2
for p in dp megatron coshard; do case_ examples/swin.nns tiny $p 2 2; done
for p in dp megatron pipeline; do case_ examples/01_mlp.nns small $p 2 2; done
for p in alltoall reducescatter stages nested; do case_ tests/plan/plans/collectives.nns small $p 4 4; done
case_ tests/plan/plans/collectives.nns small allgather 2 2

[ $fail -eq 0 ] && echo PASS
exit $fail

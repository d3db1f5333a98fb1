# Sourced by bench/megatron_h100.sh and bench/megatron_sc21.sh: one `nns
# simulate` of examples/gpt.nns, reduced to the figures those tables print.
#   simulate_step NNS PLAN DEVICE PRECISION CONFIG GPUS PLAN_GPUS [FLAGS...]
#     -> "step_ms wall_s peak_GiB rss_GB" (peak "?" where the output has none;
#        rss: the run's maximum resident set by /usr/bin/time, "?" without it)
# A run that prints no step time is reported on stderr and exits 70.
simulate_step() {
  local nns=$1 plan=$2 device=$3 precision=$4 cfg=$5 gpus=$6 plan_gpus=$7
  shift 7
  local t0 t1 out step peak rss="?" timer=() rss_file
  rss_file=$(mktemp)
  [ -x /usr/bin/time ] && timer=(/usr/bin/time -f %M -o "$rss_file")
  t0=$(date +%s.%N)
  out=$("${timer[@]}" "$nns" simulate examples/gpt.nns --config "$cfg" --plan "$plan" --gpus "$gpus" --plan-gpus "$plan_gpus" \
        --device "$device" --precision "$precision" "$@")
  t1=$(date +%s.%N)
  [ -s "$rss_file" ] && rss=$(awk '{ printf "%.2f", $1 / 1e6 }' "$rss_file")
  rm -f "$rss_file"
  step=$(sed -n 's/^simulated .*: step \([0-9.]*\) ms$/\1/p' <<<"$out")
  peak=$(sed -n 's/^  peak memory: rank [0-9]* \([0-9.]*\) GiB.*/\1/p' <<<"$out")
  [ -n "$step" ] || { echo "$(basename "$0"): no step time from nns simulate ($cfg)" >&2; echo "$out" >&2; exit 70; }
  echo "$step $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }') ${peak:-?} $rss"
}

# Sourced by the bench scripts: step times from an `nns run --metrics` file
# (one JSON line per step, "ms" to the microsecond).
#   median                 the median of the numbers on stdin ("nan" for none)
#   step_times FILE        the "ms" of steps k > $SKIP, one per line
#   step_median FILE       their median
#   step_min FILE          their least
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
step_times() { sed -n 's/^{"step": \([0-9]*\),.*"ms": \([0-9.e+-]*\)}$/\1 \2/p' "$1" | awk -v skip="$SKIP" '$1 + 0 > skip { print $2 }'; }
step_median() { step_times "$1" | median; }
step_min() { step_times "$1" | sort -g | head -1; }

#!/usr/bin/env bash
# Prints the figures `make bench` measured (lines "figure: NAME | VALUE | GOAL | VERDICT"
# in its output, file $1) as one table, goals beside them.
set -euo pipefail
in=${1:?usage: bench-table.sh BENCH_OUTPUT}
echo
echo "All figures of this run (one machine, one run; ratios and deltas are what compare):"
grep -o 'figure: .*' "$in" | sed 's/^figure: //' | awk -F' [|] ' '
	# A benchmark may report a figure per round; the last (largest b.N) counts.
	{ if (!($1 in at)) { n++; at[$1]=n; name[n]=$1 } i=at[$1]; val[i]=$2; goal[i]=$3; v[i]=$4
	  if (length($1)>w1) w1=length($1); if (length($2)>w2) w2=length($2); if (length($3)>w3) w3=length($3) }
	END {
		printf "%-*s  %-*s  %-*s  %s\n", w1, "figure", w2, "value", w3, "goal", ""
		for (i=1;i<=n;i++) printf "%-*s  %-*s  %-*s  %s\n", w1, name[i], w2, val[i], w3, goal[i], v[i]
	}'

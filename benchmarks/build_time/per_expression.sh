#!/usr/bin/env bash
# Seconds of compilation each further expression adds to a translation unit, assigned and
# differentiated (benchmarks/build_time/per_expression.cpp): compiles it (-c, header-only) with
# 0, 1 and 8 expressions, for each kind, REPS times interleaved (default 3), and prints the
# medians, the cost of the first expression (1 - 0) and of each further one ((8 - 1) / 7).
#   benchmarks/build_time/per_expression.sh        CXX=clang++ OPT=-O3 REPS=5 to vary
set -euo pipefail
cd "$(dirname "$0")/../.."
cxx=${CXX:-g++}
opt=${OPT:--O2}
reps=${REPS:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
declare -A times=()
for ((rep = 1; rep <= reps; ++rep)); do
  for autograd in 0 1; do
    for n in 0 1 8; do
      start=$(date +%s%N)
      "$cxx" -std=c++20 "$opt" -march=native -Iinclude -DAUTOGRAD=$autograd -DEXPRESSIONS=$n \
        -c benchmarks/build_time/per_expression.cpp -o "$work/probe.o"
      end=$(date +%s%N)
      times[$autograd.$n]+="$(awk -v ns=$((end - start)) 'BEGIN { printf "%.3f", ns / 1e9 }') "
    done
  done
done
median() { tr ' ' '\n' <<< "$1" | sed '/^$/d' | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo "$("$cxx" --version | head -1), $opt -march=native, $reps runs (medians, seconds)"
printf '%-14s %8s %8s %8s %8s %10s\n' kind "0 expr" "1 expr" "8 expr" first "each more"
for autograd in 0 1; do
  t0=$(median "${times[$autograd.0]}") t1=$(median "${times[$autograd.1]}")
  t8=$(median "${times[$autograd.8]}")
  kind=assigned
  [ "$autograd" = 1 ] && kind=differentiated
  awk -v k=$kind -v a="$t0" -v b="$t1" -v c="$t8" \
    'BEGIN { printf "%-14s %8.2f %8.2f %8.2f %8.2f %10.2f\n", k, a, b, c, b - a, (c - b) / 7 }'
done

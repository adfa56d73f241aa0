#!/usr/bin/env bash
# Seconds to compile and link a small program that evaluates one expression
# (y = a*x + b*z - c*w + x*z), with meld, Eigen, xtensor (+ xsimd) and as a plain loop: the median
# of 3 builds each, with the benchmarks' flags (g++ -std=c++20 -O3 -march=native).
#   scripts/bench-build-time.sh [output.json]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-}
cxx=${CXX:-g++}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
flags=(-std=c++20 -O3 -march=native -pthread)
declare -A extra=(
  [hand]=""
  [meld]="-Iinclude"
  [eigen]="-isystem /usr/include/eigen3"
  [xtensor]="-DXTENSOR_USE_XSIMD"
)
results=()
for lib in hand meld eigen xtensor; do
  times=()
  for rep in 1 2 3; do
    start=$(date +%s%N)
    # shellcheck disable=SC2086
    "$cxx" "${flags[@]}" ${extra[$lib]} "benchmarks/build_time/$lib.cpp" -o "$work/$lib"
    end=$(date +%s%N)
    times+=("$(awk -v ns=$((end - start)) 'BEGIN { printf "%.3f", ns / 1e9 }')")
  done
  "$work/$lib" 16 > /dev/null  # it runs
  median=$(printf '%s\n' "${times[@]}" | sort -g | sed -n 2p)
  printf 'build-time %-8s median %.2f s  (runs: %s)\n' "$lib" "$median" "${times[*]}"
  results+=("\"$lib\": {\"median_s\": $median, \"runs_s\": [$(IFS=,; echo "${times[*]}")]}")
done
if [ -n "$out" ]; then
  flagstr="${flags[*]}"
  (IFS=,; echo "{\"compiler\": \"$($cxx --version | head -1)\", \"flags\": \"$flagstr\", ${results[*]}}") > "$out"
fi

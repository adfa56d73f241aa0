#!/usr/bin/env bash
# Seconds to compile and link a small program that evaluates one expression
# (y = a*x + b*z - c*w + x*z), with meld (header-only, and on the compiled runtime: meld_rt, which
# links libmeld_runtime.a, built once beforehand like any library), Eigen, xtensor (+ xsimd) and as
# a plain loop, with the benchmarks' flags (g++ -std=c++20 -O3 -march=native). REPS repetitions
# (default 5), each
# building every program once in turn (hand, meld, eigen, xtensor, hand, meld, ...), so that a
# shared machine's drift falls on all of them; prints the median of each and the ratios to Eigen.
#   scripts/bench-build-time.sh [output.json]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-}
cxx=${CXX:-g++}
reps=${REPS:-5}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
flags=(-std=c++20 -O3 -march=native -pthread)
libs=(hand meld meld_rt eigen xtensor)
# The compiled runtime (CMake: meld::runtime), built once, not timed.
"$cxx" "${flags[@]}" -Iinclude -c src/runtime.cpp -o "$work/runtime.o"
ar rcs "$work/libmeld_runtime.a" "$work/runtime.o"
declare -A extra=(
  [hand]=""
  [meld]="-Iinclude"
  [meld_rt]="-Iinclude -DMELD_COMPILED_RUNTIME"
  [eigen]="-isystem /usr/include/eigen3"
  [xtensor]="-DXTENSOR_USE_XSIMD"
)
declare -A times=()
for ((rep = 1; rep <= reps; ++rep)); do
  for lib in "${libs[@]}"; do
    start=$(date +%s%N)
    # shellcheck disable=SC2086
    src=${lib%_rt}  # meld_rt builds meld.cpp
    link=""
    [ "$lib" = meld_rt ] && link="$work/libmeld_runtime.a"
    "$cxx" "${flags[@]}" ${extra[$lib]} "benchmarks/build_time/$src.cpp" -o "$work/$lib" $link
    end=$(date +%s%N)
    times[$lib]+="$(awk -v ns=$((end - start)) 'BEGIN { printf "%.3f", ns / 1e9 }') "
  done
done
declare -A median=()
results=()
for lib in "${libs[@]}"; do
  "$work/$lib" 16 > /dev/null  # it runs
  # shellcheck disable=SC2086
  median[$lib]=$(printf '%s\n' ${times[$lib]} | sort -g | awk '{ v[NR] = $1 }
    END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
  printf 'build-time %-8s median %.2f s  (runs: %s)\n' "$lib" "${median[$lib]}" "${times[$lib]% }"
  # shellcheck disable=SC2086
  results+=("\"$lib\": {\"median_s\": ${median[$lib]}, \"runs_s\": [$(printf '%s\n' ${times[$lib]} | paste -sd,)]}")
done
ratio() { awk -v a="${median[$1]}" -v b="${median[eigen]}" 'BEGIN { printf "%.2f", a / b }'; }
printf 'build-time ratio meld/eigen %s  meld_rt/eigen %s  xtensor/eigen %s  (medians of %d interleaved runs)\n' \
  "$(ratio meld)" "$(ratio meld_rt)" "$(ratio xtensor)" "$reps"
if [ -n "$out" ]; then
  flagstr="${flags[*]}"
  (IFS=,; echo "{\"compiler\": \"$($cxx --version | head -1)\", \"flags\": \"$flagstr\", \"repetitions\": $reps, ${results[*]}, \"ratio_meld_eigen\": $(ratio meld), \"ratio_meld_rt_eigen\": $(ratio meld_rt), \"ratio_xtensor_eigen\": $(ratio xtensor)}") > "$out"
fi

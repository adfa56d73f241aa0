#!/usr/bin/env bash
# Builds and runs meld's benchmarks (benchmarks/) and prints the tables of benchmarks/RESULTS.md:
# the 5-op expression against a hand loop, Eigen, xtensor and eager evaluation, STREAM triad,
# reductions, the broadcast and transcendental cases, the parallel threshold and build times.
#   scripts/bench.sh
# Environment: MELD_BENCH_REPS (repetitions, default 7), MELD_BENCH_MIN_TIME (seconds per
# repetition, default 0.1), MELD_BENCH_FILTER (a regex of benchmark names), MELD_JOBS (build jobs).
# JSON results and the table are left in build/bench/results/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
reps=${MELD_BENCH_REPS:-7}
min_time=${MELD_BENCH_MIN_TIME:-0.1}
filter=${MELD_BENCH_FILTER:-.}
jobs=${MELD_JOBS:-$(nproc)}

cmake --preset benchmarks > /dev/null
cmake --build --preset benchmarks -j "$jobs" --target meld_bench meld_bench_threshold
out=build/bench/results
mkdir -p "$out"
bin=build/bench/benchmarks
# Repetitions are interleaved in random order, so that a slow phase of a shared machine does not
# fall on one contestant; the tables report medians.
flags=(--benchmark_repetitions="$reps" --benchmark_enable_random_interleaving=true
       --benchmark_report_aggregates_only=true --benchmark_min_time="$min_time"
       --benchmark_out_format=json)

# libgomp's idle threads spin 300,000 pauses by default (~18 ms on a core with a 140-cycle pause)
# and would take the cores from meld's benchmarks that follow; give them the spin budget of meld's
# pool (4,000 pauses), so that neither side's idle threads compete with the other's work.
export GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-4000}
echo "=== $(lscpu | grep 'Model name' | sed 's/  */ /g'); load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "=== elementwise and reduction benchmarks"
"$bin/meld_bench" "${flags[@]}" --benchmark_filter="$filter" --benchmark_out="$out/meld_bench.json"
echo "=== parallel threshold"
"$bin/meld_bench_threshold" "${flags[@]}" --benchmark_filter="$filter" \
  --benchmark_out="$out/threshold.json"
echo "=== build time"
scripts/bench-build-time.sh "$out/build_time.json"
echo "=== load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) (a busy machine skews multi-threaded results)"
echo
python3 scripts/bench_table.py --bench "$out/meld_bench.json" --threshold "$out/threshold.json" \
  --build-time "$out/build_time.json" | tee "$out/table.md"

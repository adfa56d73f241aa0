#!/usr/bin/env bash
# Data-parallel scaling of the training example: samples/s of 2 workers x 1 thread against
# 1 worker x 1 thread (threads backend, batch BATCH, default 1024), for the MLP (EPOCHS epochs,
# default 2) and LeNet (1 epoch of LENET_LIMIT images, default 15000); runs interleaved, the median
# of REPS runs each (default 3). The example's samples/s is training throughput (the test pass is
# not counted). Several builds (name=binary) run interleaved in the same loop, so that a shared
# machine's drift falls on all of them.
#   benchmarks/example_scaling.sh build/release/examples/train_fashion_mnist
#   benchmarks/example_scaling.sh before=/tmp/old/train_fashion_mnist after=build/release/examples/train_fashion_mnist
# Prints a Markdown table for benchmarks/RESULTS.md.
set -euo pipefail
reps=${REPS:-3} batch=${BATCH:-1024}
[ $# -ge 1 ] || { echo "usage: $0 [name=]<train_fashion_mnist binary>..." >&2; exit 2; }
names=() bins=()
for arg in "$@"; do
  if [[ $arg == *=* ]]; then names+=("${arg%%=*}") bins+=("${arg#*=}"); else names+=("") bins+=("$arg"); fi
done
rate() {  # rate <binary> <args...>: the samples/s of the example's last line
  "$@" 2> /dev/null | tail -1 | sed -n 's/.*samples_per_sec=\([0-9.]*\).*/\1/p'
}
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
build_col="" build_sep=""
[ $# -gt 1 ] && build_col=" build |" build_sep=" --- |"
echo "| model |$build_col batch | 1 worker x 1 thread (samples/s) | 2 workers x 1 thread (samples/s) | speedup |"
echo "| --- |$build_sep --- | --- | --- | --- |"
for model in mlp lenet; do
  run=(--model "$model" --batch "$batch" --threads 1)
  if [ "$model" = lenet ]; then run+=(--epochs 1 --limit "${LENET_LIMIT:-15000}"); else run+=(--epochs "${EPOCHS:-2}"); fi
  declare -A one=() two=()
  for ((r = 0; r < reps; ++r)); do
    for i in "${!bins[@]}"; do
      one[$i]+="$(rate "${bins[$i]}" "${run[@]}" --workers 1) "
      two[$i]+="$(rate "${bins[$i]}" "${run[@]}" --workers 2) "
    done
  done
  for i in "${!bins[@]}"; do
    # shellcheck disable=SC2086
    a=$(median ${one[$i]}) b=$(median ${two[$i]})
    col=""
    [ $# -gt 1 ] && col=" ${names[$i]:-${bins[$i]}} |"
    echo "| $model |$col $batch | $a | $b | $(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.2f", b / a}') |"
  done
  unset one two
done

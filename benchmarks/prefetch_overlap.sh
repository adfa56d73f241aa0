#!/usr/bin/env bash
# The training example's input pipeline, measured: samples/s with the next batch gathered while
# the step computes (the default) and without (--no-prefetch), side by side, for each example
# build given and both models (the MLP 3 epochs, LeNet 1 epoch of LENET_LIMIT images, default
# 15000); runs interleaved, the median of REPS runs each (default 3).
#   benchmarks/prefetch_overlap.sh build/release/examples/train_fashion_mnist \
#                                  build/release/examples/train_fashion_mnist_sim
# Prints a Markdown table for benchmarks/RESULTS.md.
set -euo pipefail
reps=${REPS:-3}
[ $# -gt 0 ] || { echo "usage: $0 <train_fashion_mnist binary>..." >&2; exit 2; }
rate() {  # rate <binary> <args...>: the samples/s of the example's last line
  "$@" 2> /dev/null | tail -1 | sed -n 's/.*samples_per_sec=\([0-9.]*\).*/\1/p'
}
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
echo "| build | model | epochs | prefetch (samples/s) | --no-prefetch (samples/s) | ratio |"
echo "| --- | --- | --- | --- | --- | --- |"
for bin in "$@"; do
  for model in mlp lenet; do
    epochs=3 limit=()
    [ "$model" = lenet ] && epochs=1 limit=(--limit "${LENET_LIMIT:-15000}")
    with=() without=()
    for ((r = 0; r < reps; ++r)); do
      with+=("$(rate "$bin" --model "$model" --epochs "$epochs" "${limit[@]}")")
      without+=("$(rate "$bin" --model "$model" --epochs "$epochs" "${limit[@]}" --no-prefetch)")
    done
    w=$(median "${with[@]}") wo=$(median "${without[@]}")
    echo "| $(basename "$bin") | $model | $epochs | $w | $wo | $(awk -v a="$w" -v b="$wo" 'BEGIN {printf "%.3f", a / b}') |"
  done
done

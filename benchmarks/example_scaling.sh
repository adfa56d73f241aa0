#!/usr/bin/env bash
# Data-parallel scaling of the training example: samples/s of 2 workers x 1 thread against
# 1 worker x 1 thread (threads backend, batch BATCH, default 1024), for the MLP (EPOCHS epochs,
# default 2) and LeNet (1 epoch of LENET_LIMIT images, default 15000); runs interleaved, the median
# of REPS runs each (default 3). The example's samples/s is training throughput (the test pass is
# not counted).
#   benchmarks/example_scaling.sh build/release/examples/train_fashion_mnist
# Prints a Markdown table for benchmarks/RESULTS.md.
set -euo pipefail
reps=${REPS:-3} batch=${BATCH:-1024}
[ $# -eq 1 ] || { echo "usage: $0 <train_fashion_mnist binary>" >&2; exit 2; }
bin=$1
rate() {  # rate <args...>: the samples/s of the example's last line
  "$bin" "$@" 2> /dev/null | tail -1 | sed -n 's/.*samples_per_sec=\([0-9.]*\).*/\1/p'
}
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
echo "| model | batch | 1 worker x 1 thread (samples/s) | 2 workers x 1 thread (samples/s) | speedup |"
echo "| --- | --- | --- | --- | --- |"
for model in mlp lenet; do
  run=(--model "$model" --batch "$batch" --threads 1)
  if [ "$model" = lenet ]; then run+=(--epochs 1 --limit "${LENET_LIMIT:-15000}"); else run+=(--epochs "${EPOCHS:-2}"); fi
  one=() two=()
  for ((r = 0; r < reps; ++r)); do
    one+=("$(rate "${run[@]}" --workers 1)")
    two+=("$(rate "${run[@]}" --workers 2)")
  done
  a=$(median "${one[@]}") b=$(median "${two[@]}")
  echo "| $model | $batch | $a | $b | $(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.2f", b / a}') |"
done

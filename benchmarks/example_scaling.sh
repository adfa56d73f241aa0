#!/usr/bin/env bash
# Data-parallel scaling of the training example: samples/s of 2 workers x 1 thread, without and
# with --shard-optimizer, against 1 worker x 1 thread and against the machine's 2-worker ceiling:
# the summed samples/s of two independent 1-worker runs at the same time (what 2 workers would
# reach if data_parallel cost nothing). Threads backend, batch BATCH (default 1024), the MLP
# (EPOCHS epochs, default 2) and LeNet (1 epoch of LENET_LIMIT images, default 15000); runs
# interleaved, the median of REPS runs each (default 3). The example's samples/s is training
# throughput (the test pass is not counted). Several builds (name=binary) run interleaved in the
# same loop, so that a shared machine's drift falls on all of them; a build without
# --shard-optimizer shows "-" there.
#   benchmarks/example_scaling.sh build/release/examples/train_fashion_mnist
#   benchmarks/example_scaling.sh before=/tmp/old/train_fashion_mnist after=build/release/examples/train_fashion_mnist
# Prints a Markdown table for benchmarks/RESULTS.md, then each round's own ratios (2 workers and
# sharded over that round's ceiling), whose spread shows how far a noisy machine moves the medians.
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
build_col="" build_sep="" spread=""
[ $# -gt 1 ] && build_col=" build |" build_sep=" --- |"
echo "| model |$build_col batch | 1 worker (samples/s) | ceiling: two 1-worker runs at once | 2 workers | 2 workers, sharded optimizer | 2 workers / ceiling | sharded / ceiling |"
echo "| --- |$build_sep --- | --- | --- | --- | --- | --- | --- |"
for model in mlp lenet; do
  run=(--model "$model" --batch "$batch" --threads 1)
  if [ "$model" = lenet ]; then run+=(--epochs 1 --limit "${LENET_LIMIT:-15000}"); else run+=(--epochs "${EPOCHS:-2}"); fi
  declare -A one=() two=() sharded=() ceiling=() rounds=()
  for ((r = 0; r < reps; ++r)); do
    for i in "${!bins[@]}"; do
      one[$i]+="$(rate "${bins[$i]}" "${run[@]}" --workers 1) "
      t=$(rate "${bins[$i]}" "${run[@]}" --workers 2)
      two[$i]+="$t "
      s=$(rate "${bins[$i]}" "${run[@]}" --workers 2 --shard-optimizer || true)
      sharded[$i]+="${s:--} "
      tmp=$(mktemp)
      rate "${bins[$i]}" "${run[@]}" --workers 1 > "$tmp" &
      b=$(rate "${bins[$i]}" "${run[@]}" --workers 1)
      wait
      c=$(awk -v a="$(cat "$tmp")" -v b="$b" 'BEGIN {printf "%.1f", a + b}')
      ceiling[$i]+="$c "
      rounds[$i]+="$(awk -v t="$t" -v s="${s:--}" -v c="$c" \
        'BEGIN {printf "%.2f/%s", t / c, (s == "-" ? "-" : sprintf("%.2f", s / c))}') "
      rm -f "$tmp"
    done
  done
  for i in "${!bins[@]}"; do
    # shellcheck disable=SC2086
    a=$(median ${one[$i]}) c=$(median ${ceiling[$i]}) b=$(median ${two[$i]})
    # shellcheck disable=SC2086
    sh=$(printf '%s\n' ${sharded[$i]} | grep -v -- '^-$' || true)
    # shellcheck disable=SC2086
    [ -n "$sh" ] && sh=$(median $sh) || sh="-"
    col=""
    [ $# -gt 1 ] && col=" ${names[$i]:-${bins[$i]}} |"
    frac() { [ "$1" = - ] && echo - || awk -v x="$1" -v c="$c" 'BEGIN {printf "%.2f", x / c}'; }
    echo "| $model |$col $batch | $a | $c | $b | $sh | $(frac "$b") | $(frac "$sh") |"
  done
  for i in "${!bins[@]}"; do
    spread+="$model${names[$i]:+ (${names[$i]})}, each round's 2 workers / ceiling and sharded / ceiling: ${rounds[$i]}"$'\n'
  done
  unset one two sharded ceiling rounds
done
echo
printf '%s' "$spread"

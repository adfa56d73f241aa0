#!/usr/bin/env bash
# LeNet training throughput, meld against PyTorch (CPU), side by side in one run: the example's
# LeNet (examples/train_fashion_mnist.cpp --model lenet, its defaults: batch 256, SGD with Nesterov
# momentum 0.9 and cosine decay) and the same network in PyTorch (benchmarks/lenet_torch.py), one
# epoch over the first LIMIT training images, at 1 and at 2 threads. The runs are interleaved
# (meld, torch, meld, torch, ...) so that a noisy machine slows both alike; the table gives the
# median samples/s of each and the ratio meld / torch.
#
#   benchmarks/lenet_vs_torch.sh [BUILD_DIR] [REPS] [LIMIT]
#     BUILD_DIR  a release build with examples/train_fashion_mnist built (default build/release)
#     REPS       repetitions per side and thread count (default 3)
#     LIMIT      training images per run (default 15000)
#   THREADS="1 2" (the environment) chooses the thread counts; PYTHON the interpreter with torch
#   (default /usr/bin/python3). Without torch, meld alone is measured and the ratio is skipped.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build/release}
reps=${2:-3}
limit=${3:-15000}
threads=${THREADS:-1 2}
python=${PYTHON:-/usr/bin/python3}
exe=$build/examples/train_fashion_mnist

if [[ ! -x $exe ]]; then
  echo "lenet_vs_torch.sh: $exe is missing; build it with" >&2
  echo "  cmake --preset release -B $build && cmake --build $build --target train_fashion_mnist" >&2
  exit 1
fi
have_torch=1
if ! "$python" -c 'import torch' 2>/dev/null; then
  echo "lenet_vs_torch.sh: torch is not importable by $python; measuring meld only" >&2
  have_torch=0
fi

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR] = $1} END {
  if (NR == 0) print "nan"; else if (NR % 2) print a[(NR + 1) / 2];
  else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

meld_run() {  # threads -> samples/s
  MELD_NUM_THREADS=$1 "$exe" --model lenet --epochs 1 --limit "$limit" --threads "$1" 2>/dev/null |
    sed -n 's/.*samples_per_sec=\([0-9.]*\).*/\1/p'
}
torch_run() {
  "$python" "$here/lenet_torch.py" --threads "$1" --limit "$limit" |
    sed -n 's/.*samples_per_sec=\([0-9.]*\).*/\1/p'
}

echo "LeNet, 1 epoch of $limit images, batch 256; samples/s, $reps interleaved repetitions"
echo
echo "| threads | meld (median) | torch (median) | meld / torch | meld runs | torch runs |"
echo "| --- | --- | --- | --- | --- | --- |"
for t in $threads; do
  m_runs="" t_runs=""
  for ((r = 0; r < reps; ++r)); do
    m_runs+="$(meld_run "$t") "
    if ((have_torch)); then t_runs+="$(torch_run "$t") "; fi
  done
  m=$(echo "$m_runs" | median)
  if ((have_torch)); then
    p=$(echo "$t_runs" | median)
    ratio=$(awk -v a="$m" -v b="$p" 'BEGIN { printf "%.2f", a / b }')
  else
    p="-" ratio="- (no torch)"
  fi
  printf '| %s | %.0f | %s | %s | %s| %s|\n' "$t" "$m" \
    "$([[ $p == - ]] && echo - || printf '%.0f' "$p")" "$ratio" "$m_runs" "${t_runs:--}"
done

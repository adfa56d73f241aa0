#!/usr/bin/env bash
# LeNet training throughput, meld against PyTorch (CPU), side by side in one run: the example's
# LeNet (examples/train_fashion_mnist.cpp --model lenet, its defaults: batch 256, SGD with Nesterov
# momentum 0.9 and cosine decay) and the same network in PyTorch (benchmarks/lenet_torch.py), one
# epoch over the first LIMIT training images, at 1 and at 2 threads. The runs are interleaved
# (meld, torch, meld, torch, ...) so that a noisy machine slows both alike; the table gives the
# median samples/s of each and the ratio meld / torch. Each torch run is the faster of OpenBLAS's
# own CPU detection and OPENBLAS_CORETYPE=SkylakeX.
#
#   benchmarks/lenet_vs_torch.sh [BUILD_DIR] [REPS] [LIMIT]
#     BUILD_DIR  a release build with examples/train_fashion_mnist built (default build/release)
#     REPS       repetitions per side and thread count (default 3)
#     LIMIT      training images per run (default 15000)
#   MODEL=mlp (the environment) measures the example's MLP (784-256-128-10) instead of LeNet;
#   THREADS="1 2" chooses the thread counts; PYTHON the interpreter with torch
#   (default /usr/bin/python3). Without torch, meld alone is measured and the ratio is skipped.
#   MELD_EXES="name=path ..." measures several builds of the example instead (e.g. before and
#   after a change), each interleaved with the others and torch, one table row each.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build/release}
reps=${2:-3}
limit=${3:-15000}
threads=${THREADS:-1 2}
model=${MODEL:-lenet}
python=${PYTHON:-/usr/bin/python3}
exes=${MELD_EXES:-meld=$build/examples/train_fashion_mnist}

for e in $exes; do
  if [[ ! -x ${e#*=} ]]; then
    echo "lenet_vs_torch.sh: ${e#*=} is missing; build it with" >&2
    echo "  cmake --preset release -B $build && cmake --build $build --target train_fashion_mnist" >&2
    exit 1
  fi
done
have_torch=1
if ! "$python" -c 'import torch' 2>/dev/null; then
  echo "lenet_vs_torch.sh: torch is not importable by $python; measuring meld only" >&2
  have_torch=0
fi

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR] = $1} END {
  if (NR == 0) print "nan"; else if (NR % 2) print a[(NR + 1) / 2];
  else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

meld_run() {  # executable, threads -> samples/s
  MELD_NUM_THREADS=$2 "$1" --model "$model" --epochs 1 --limit "$limit" --threads "$2" 2>/dev/null |
    sed -n 's/.*samples_per_sec=\([0-9.]*\).*/\1/p'
}
# The peer at its best: OpenBLAS with its own CPU detection and with its AVX-512 kernel forced (it
# falls back to an older kernel on CPUs newer than it knows); the faster of the two runs counts.
torch_run() {
  local best=0 rate
  for coretype in detected SkylakeX; do
    local env_args=(-u OPENBLAS_CORETYPE)
    [[ $coretype == detected ]] || env_args=(OPENBLAS_CORETYPE=$coretype)
    rate=$(env "${env_args[@]}" "$python" "$here/lenet_torch.py" --model "$model" \
      --threads "$1" --limit "$limit" | sed -n 's/.*samples_per_sec=\([0-9.]*\).*/\1/p')
    best=$(awk -v a="$best" -v b="${rate:-0}" 'BEGIN { print (b > a ? b : a) }')
  done
  echo "$best"
}

echo "$model, 1 epoch of $limit images, batch 256; samples/s, $reps interleaved repetitions"
echo
echo "| threads | build | meld (median) | torch (median) | meld / torch | meld runs | torch runs |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for t in $threads; do
  declare -A m_runs=()
  t_runs=""
  for ((r = 0; r < reps; ++r)); do
    for e in $exes; do m_runs[${e%%=*}]+="$(meld_run "${e#*=}" "$t") "; done
    if ((have_torch)); then t_runs+="$(torch_run "$t") "; fi
  done
  p="-"
  if ((have_torch)); then p=$(echo "$t_runs" | median); fi
  for e in $exes; do
    name=${e%%=*}
    m=$(echo "${m_runs[$name]}" | median)
    if ((have_torch)); then
      ratio=$(awk -v a="$m" -v b="$p" 'BEGIN { printf "%.2f", a / b }')
      shown_p=$(printf '%.0f' "$p")
    else
      ratio="- (no torch)" shown_p="-"
    fi
    printf '| %s | %s | %.0f | %s | %s | %s| %s|\n' "$t" "$name" "$m" "$shown_p" "$ratio" \
      "${m_runs[$name]}" "${t_runs:--}"
  done
  unset m_runs
done

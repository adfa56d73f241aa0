#!/usr/bin/env bash
# LeNet training throughput, meld against PyTorch (CPU), side by side in one run: the example's
# LeNet (examples/train_fashion_mnist.cpp --model lenet, its defaults: batch 256, SGD with Nesterov
# momentum 0.9 and cosine decay) and the same network in PyTorch (benchmarks/lenet_torch.py), one
# epoch over the first LIMIT training images, at 1 and at 2 threads. The runs are interleaved
# (meld, torch, meld, torch, ...) so that a noisy machine slows both alike; the table gives the
# median samples/s of each and the ratio meld / torch. Each torch run is the faster of OpenBLAS's
# own CPU detection and OPENBLAS_CORETYPE=SkylakeX. The best run of each side and their ratio
# follow the medians.
#
# T threads means T cores for both: each run is pinned to cores 0 .. T-1 (taskset), which also
# holds meld's input-pipeline thread and the interpreter to them, and OpenBLAS runs T threads (its
# default is every core, whatever torch.set_num_threads says: unpinned, the "1 thread" PyTorch
# multiplied on 2 cores). PIN=0 leaves the runs unpinned.
#
#   benchmarks/lenet_vs_torch.sh [BUILD_DIR] [REPS] [LIMIT]
#     BUILD_DIR  a release build with examples/train_fashion_mnist built (default build/release)
#     REPS       repetitions per side and thread count (default 3)
#     LIMIT      training images per run (default 15000)
#   MODEL=mlp (the environment) measures the example's MLP (784-256-128-10) instead of LeNet, and,
#   where BUILD_DIR has benchmarks/bench_matmul, the step against the machine's SGEMM peak: each
#   round also runs meld's 1024 and 2048 products on the same cores, the best is the peak, and the
#   step's rate is samples/s times the FLOPs of its products per sample.
#   THREADS="1 2" chooses the thread counts (default "1 2"); "all" is the whole machine, unpinned,
#   each side at its best: meld the faster of one worker on every core and a worker per core
#   (--workers), PyTorch the faster of 1 and N intra-op threads, OpenBLAS at its own thread count
#   (every core). PYTHON is the interpreter with torch
#   (default /usr/bin/python3). Without torch, meld alone is measured and the ratio is skipped.
#   PRECISION=bf16 trains both sides in bfloat16 mixed precision: meld's --precision bf16 (its
#   linear layers' products read bfloat16 copies, float accumulation) and PyTorch's
#   torch.autocast("cpu", dtype=torch.bfloat16) around the forward pass and the loss.
#   PRECISION="float bf16" measures both, interleaved, a row each (bf16 against float: the rows'
#   ratio).
#   MELD_EXES="name=path ..." measures several builds of the example instead (e.g. before and
#   after a change), each interleaved with the others and torch, one table row each.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build/release}
reps=${2:-3}
limit=${3:-15000}
threads=${THREADS:-1 2}
model=${MODEL:-lenet}
precisions=${PRECISION:-float}
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

best() { tr ' ' '\n' | grep -v '^$' | sort -g | tail -1; }
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR] = $1} END {
  if (NR == 0) print "nan"; else if (NR % 2) print a[(NR + 1) / 2];
  else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

on_cores() {  # threads, command...: the command on cores 0 .. threads-1
  local t=$1
  shift
  if [[ ${PIN:-1} != 0 ]] && command -v taskset > /dev/null; then
    taskset -c "0-$((t - 1))" "$@"
  else
    "$@"
  fi
}
rate_of() { sed -n 's/.*samples_per_sec=\([0-9.]*\).*/\1/p'; }
cores=$(nproc)
meld_run() {  # executable, threads, precision -> samples/s
  # (--precision only for bf16: float is the default, and custom_model, which MELD_EXES may name,
  # trains in float and has no such flag.)
  local run=("$1" --model "$model" --epochs 1 --limit "$limit")
  if [ "$3" != float ]; then run+=(--precision "$3"); fi
  if [[ $2 == all ]]; then  # every core, unpinned: the faster of 1 worker and one per core
    echo "$(MELD_NUM_THREADS=$cores "${run[@]}" --threads "$cores" 2>/dev/null | rate_of)" \
      "$("${run[@]}" --workers "$cores" --threads 1 2>/dev/null | rate_of)" | best
  else
    MELD_NUM_THREADS=$2 on_cores "$2" "${run[@]}" --threads "$2" 2>/dev/null | rate_of
  fi
}
# The best GFLOP/s of meld's 1024 and 2048 products on `threads` threads and cores.
peak_run() {
  on_cores "$1" "$build/benchmarks/bench_matmul" --benchmark_filter="^meld/n:(1024|2048)/threads:$1/" \
    2>/dev/null | sed -n 's/.*GFLOP\/s=\([0-9.]*\)\/s.*/\1/p' | best
}
measure_peak=0
if [[ $model == mlp && -x $build/benchmarks/bench_matmul ]]; then measure_peak=1; fi
# FLOPs of the MLP step's products per sample: the forward (784x256, 256x128, 128x10), the weight
# gradients (the same), the input gradients of the second and third layers (not the first's).
mlp_flops=$(((784 * 256 + 256 * 128 + 128 * 10) * 2 * 2 + (256 * 128 + 128 * 10) * 2))
# The peer at its best: OpenBLAS with its own CPU detection and, where the CPU has AVX-512, with its
# AVX-512 kernel forced (it falls back to an older kernel on CPUs newer than it knows); the faster
# of the two runs counts.
torch_run() {  # threads, precision -> samples/s
  local rates="" configs coretypes=detected
  if grep -qw avx512f /proc/cpuinfo 2> /dev/null; then coretypes+=" SkylakeX"; fi
  if [[ $1 == all ]]; then  # every core, unpinned, OpenBLAS's own thread count: 1 or N intra-op
    configs="1:default $cores:default"
  else
    configs="$1:$1"
  fi
  for coretype in $coretypes; do
    for config in $configs; do
      local t=${config%%:*} blas=${config#*:} env_args=(-u OPENBLAS_CORETYPE)
      [[ $coretype == detected ]] || env_args=(OPENBLAS_CORETYPE=$coretype)
      [[ $blas == default ]] || env_args+=(OPENBLAS_NUM_THREADS="$blas" OMP_NUM_THREADS="$blas")
      local pin=("on_cores" "$t")
      [[ $1 == all ]] && pin=()
      rates+="$("${pin[@]}" env "${env_args[@]}" "$python" "$here/lenet_torch.py" \
        --model "$model" --threads "$t" --limit "$limit" --precision "$2" | rate_of) "
    done
  done
  echo "$rates" | best
}

echo "$model ($precisions), 1 epoch of $limit images, batch 256; samples/s, $reps interleaved repetitions"
echo
steps=()
echo "| threads | build | meld (median) | torch (median) | meld / torch | meld (best) | torch (best) | best / best | meld runs | torch runs |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for t in $threads; do
  declare -A m_runs=() t_runs_of=()
  peak=0
  for ((r = 0; r < reps; ++r)); do
    for precision in $precisions; do
      for e in $exes; do m_runs[${e%%=*} $precision]+="$(meld_run "${e#*=}" "$t" "$precision") "; done
      if ((have_torch)); then t_runs_of[$precision]+="$(torch_run "$t" "$precision") "; fi
    done
    if ((measure_peak)); then
      peak=$(echo "$peak $(peak_run "$([[ $t == all ]] && echo "$cores" || echo "$t")")" | best)
    fi
  done
  for precision in $precisions; do
    t_runs=${t_runs_of[$precision]:-} p="-" pb="-"
    if ((have_torch)); then p=$(echo "$t_runs" | median) pb=$(echo "$t_runs" | best); fi
    for e in $exes; do
      name="${e%%=*} $precision"
      m=$(echo "${m_runs[$name]}" | median) mb=$(echo "${m_runs[$name]}" | best)
      if ((have_torch)); then
        ratio=$(awk -v a="$m" -v b="$p" 'BEGIN { printf "%.2f", a / b }')
        ratio_b=$(awk -v a="$mb" -v b="$pb" 'BEGIN { printf "%.2f", a / b }')
        shown_p=$(printf '%.0f' "$p") shown_pb=$(printf '%.0f' "$pb")
      else
        ratio="- (no torch)" ratio_b="-" shown_p="-" shown_pb="-"
      fi
      printf '| %s | %s | %.0f | %s | %s | %.0f | %s | %s | %s| %s|\n' "$t" "$name" "$m" "$shown_p" \
        "$ratio" "$mb" "$shown_pb" "$ratio_b" "${m_runs[$name]}" "${t_runs:--}"
      if ((measure_peak)); then  # the best step against the best product, as the goal asks
        steps+=("$(awk -v m="$mb" -v f="$mlp_flops" -v p="$peak" -v t="$t" -v n="$name" 'BEGIN {
          printf "%s at %s threads: the best step %.1f GFLOP/s (%d FLOPs a sample), the SGEMM peak %.1f GFLOP/s: %.0f %%",
            n, t, m * f / 1e9, f, p, 100 * m * f / 1e9 / p }')")
      fi
    done
  done
  unset m_runs t_runs_of
done
if ((${#steps[@]})); then
  echo
  printf '%s\n' "${steps[@]}"
fi

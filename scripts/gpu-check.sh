#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: configures meld with CUDA (and NCCL where the toolkit has it),
# builds the GPU tests, benchmarks and the training example (CUDA and CPU builds), runs the GPU
# tests and benchmarks, trains the MLP and LeNet on Fashion-MNIST on the GPU and on the CPU
# (10 epochs each; the accuracies should agree within 0.005), runs data_parallel over NCCL with
# one rank, and with two GPUs or more two ranks, and prints a summary. Meant to finish in under
# 8 minutes on one H200 with 16 cores.
#
# Dependencies: CMake, ninja, nvcc (CUDA 13), and xsimd, Catch2, Google Benchmark, zlib and the
# Fashion-MNIST files. Where those are not installed (the lent GPU machines have no Debian
# packages), prepare them here with `scripts/prepare-gpu-deps.sh` (copies them into .deps/, which
# git ignores) and carry .deps along.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-build/gpu-report}
mkdir -p "$out"
start=$SECONDS
prefix=()
[ -d .deps ] && prefix=(-DCMAKE_PREFIX_PATH="$PWD/.deps")
[ -d .deps ] && export LD_LIBRARY_PATH="$PWD/.deps/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
data=/usr/share/datasets/fashion-mnist
[ -d .deps/fashion-mnist ] && data=$PWD/.deps/fashion-mnist
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
gpus=$(nvidia-smi -L | wc -l)
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
nccl=OFF
for d in "$(dirname "$nvcc")/../include" /usr/include /usr/local/cuda/include; do
  [ -f "$d/nccl.h" ] && nccl=ON
done
# Without NCCL in the toolkit, PyTorch's pip package of NCCL (nvidia-nccl-cu13) will do: its
# header and library, under the names CMake looks for, in build/nccl-home.
if [ "$nccl" = OFF ] && [ -z "${NCCL_HOME:-}" ]; then
  pynccl=$(python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
  if [ -n "$pynccl" ] && [ -f "$pynccl/include/nccl.h" ] && [ -f "$pynccl/lib/libnccl.so.2" ]; then
    mkdir -p build/nccl-home/lib
    ln -sfn "$pynccl/include" build/nccl-home/include
    ln -sf "$pynccl/lib/libnccl.so.2" build/nccl-home/lib/libnccl.so
    export NCCL_HOME=$PWD/build/nccl-home LD_LIBRARY_PATH="$pynccl/lib:${LD_LIBRARY_PATH:-}"
    nccl=ON
    echo "NCCL from $pynccl"
  fi
fi

configure() {
  echo "=== configure (NCCL $nccl, $gpus GPU(s))"
  rm -rf build/gpu
  cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMELD_ENABLE_CUDA=ON \
    -DMELD_ENABLE_NCCL=$nccl -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES=native \
    -DMELD_BUILD_EXAMPLES=ON "-DMELD_EXAMPLE_BACKENDS=cpu;cuda" "${prefix[@]}" \
    > "$out/configure.log" 2>&1
}
# A machine's NCCL that does not configure costs the NCCL checks, not the run.
configure || { [ "$nccl" = ON ] && tail -15 "$out/configure.log" && nccl=OFF && configure; } ||
  { tail -30 "$out/configure.log"; exit 1; }
echo "=== build (GPU tests, benchmarks, the training example for cuda and cpu)"
cmake --build build/gpu --target meld_cuda_targets train_fashion_mnist -j "$(nproc)" \
  > "$out/build.log" 2>&1 || { tail -50 "$out/build.log"; exit 1; }
echo "    built in $((SECONDS - start)) s"

status=0
echo "=== GPU tests"
ctest --test-dir build/gpu -L gpu --output-on-failure --timeout 150 2>&1 | tee "$out/tests.log" ||
  status=1

echo "=== GPU benchmarks"
build/gpu/benchmarks/bench_cuda --benchmark_min_time=0.2 --benchmark_out="$out/bench_cuda.json" \
  --benchmark_out_format=json > "$out/bench.log" 2>&1 || status=1
tail -40 "$out/bench.log"

echo "=== training (10 epochs each)"
train() {  # train <name> <binary> <args...>: the last line of the run, into $out/<name>.txt
  local name=$1 bin=$2
  shift 2
  local t0=$SECONDS
  if timeout 120 "$bin" --data "$data" --epochs 10 "$@" > "$out/train-$name.log" 2>&1; then
    echo "$name: $(tail -1 "$out/train-$name.log") ($((SECONDS - t0)) s)" | tee -a "$out/training.txt"
  else
    echo "$name: FAILED ($(tail -1 "$out/train-$name.log"))" | tee -a "$out/training.txt"
    status=1
  fi
}
: > "$out/training.txt"
ex=build/gpu/examples
train mlp-cuda $ex/train_fashion_mnist_cuda --model mlp
train mlp-cpu $ex/train_fashion_mnist --model mlp
train lenet-cuda $ex/train_fashion_mnist_cuda --model lenet
train lenet-cpu $ex/train_fashion_mnist --model lenet
# (With NCCL the cuda runs above are nccl_comm with one rank.) Two workers sharing the one GPU
# through thread_comm: the gradient buckets staged through host memory.
train mlp-cuda-2workers-threads $ex/train_fashion_mnist_cuda --model mlp --workers 2 \
  --backend threads --epochs 3
if [ "$nccl" = ON ] && [ "$gpus" -ge 2 ]; then
  train lenet-cuda-2gpus $ex/train_fashion_mnist_cuda --model lenet --workers 2
fi

echo "=== summary"
python3 - "$out" <<'PY' | tee "$out/summary.txt"
import json, re, sys
out = sys.argv[1]
try:
    data = json.load(open(f"{out}/bench_cuda.json"))
    rows = {b["name"]: b for b in data["benchmarks"]}
    peak = None
    for line in open(f"{out}/bench.log"):
        m = re.search(r"theoretical memory bandwidth: (\d+) GB/s", line)
        if m: peak = float(m.group(1))
    def gbs(name): return rows[name]["bytes_per_second"] / 1e9 if name in rows else float("nan")
    print(f"theoretical bandwidth {peak} GB/s")
    for n in [1 << 20, 1 << 24, 1 << 28]:
        c = gbs(f"BM_copy_d2d/{n}/manual_time"); m = gbs(f"BM_five_op_meld/{n}/manual_time")
        print(f"five-op N={n}: meld {m:.0f} GB/s, copy {c:.0f} GB/s ({100 * m / c:.0f} % of copy)")
except Exception as e:  # the benchmark may have failed; the training lines still print
    print(f"benchmarks: {e}")
acc = {}
for line in open(f"{out}/training.txt"):
    m = re.match(r"(\S+): test_accuracy=([0-9.]+) samples_per_sec=([0-9.]+)", line)
    if m: acc[m.group(1)] = (float(m.group(2)), float(m.group(3)))
for model in ["mlp", "lenet"]:
    g, c = acc.get(f"{model}-cuda"), acc.get(f"{model}-cpu")
    if g and c:
        print(f"{model}: GPU test_accuracy {g[0]:.4f} ({g[1]:.0f} samples/s), CPU {c[0]:.4f} "
              f"({c[1]:.0f} samples/s): difference {abs(g[0] - c[0]):.4f} "
              f"({'within' if abs(g[0] - c[0]) <= 0.005 else 'OUTSIDE'} 0.005), "
              f"GPU/CPU speed {g[1] / c[1]:.1f}x")
PY
echo "=== done in $((SECONDS - start)) s"
exit $status

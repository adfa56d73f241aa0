#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: configures meld with CUDA, builds the GPU tests and benchmarks,
# runs them and prints a summary. About 4-6 minutes on 16 cores with one H200.
#
# Dependencies: CMake, ninja, nvcc (CUDA 13), and xsimd, Catch2 and Google Benchmark. Where those
# three are not installed (the lent GPU machines have no Debian packages), prepare them here with
# `scripts/prepare-gpu-deps.sh` (copies them into .deps/, which git ignores) and carry .deps along.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-build/gpu-report}
mkdir -p "$out"
start=$SECONDS
prefix=()
[ -d .deps ] && prefix=(-DCMAKE_PREFIX_PATH="$PWD/.deps")
[ -d .deps ] && export LD_LIBRARY_PATH="$PWD/.deps/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"

echo "=== configure"
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMELD_ENABLE_CUDA=ON \
  -DCMAKE_CUDA_COMPILER="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)" \
  -DCMAKE_CUDA_ARCHITECTURES=native -DMELD_BUILD_EXAMPLES=OFF "${prefix[@]}" > "$out/configure.log"
echo "=== build (GPU tests and benchmarks)"
cmake --build build/gpu --target meld_cuda_targets -j "$(nproc)" > "$out/build.log" 2>&1 || {
  tail -50 "$out/build.log"; exit 1; }
echo "    built in $((SECONDS - start)) s"

echo "=== GPU tests"
status=0
ctest --test-dir build/gpu -L gpu --output-on-failure --timeout 300 2>&1 | tee "$out/tests.log" || status=1

echo "=== GPU benchmarks"
build/gpu/benchmarks/bench_cuda --benchmark_min_time=0.2 --benchmark_out="$out/bench_cuda.json" \
  --benchmark_out_format=json 2>&1 | tee "$out/bench.log" || status=1

echo "=== summary"
python3 - "$out/bench_cuda.json" <<'PY' | tee "$out/summary.txt"
import json, re, sys, subprocess
data = json.load(open(sys.argv[1]))
peak = None
for line in open(sys.argv[1].replace("bench_cuda.json", "bench.log")):
    m = re.search(r"theoretical memory bandwidth: (\d+) GB/s", line)
    if m: peak = float(m.group(1))
rows = {b["name"]: b for b in data["benchmarks"]}
def gbs(name): return rows[name]["bytes_per_second"] / 1e9 if name in rows else float("nan")
print(f"theoretical bandwidth {peak} GB/s")
print(f"{'N':>12} {'copy GB/s':>10} {'meld GB/s':>10} {'% peak':>7} {'% copy':>7} {'thrust GB/s':>12} {'meld/thrust':>11}")
for n in [1 << 20, 1 << 22, 1 << 24, 1 << 26, 1 << 28]:
    c = gbs(f"BM_copy_d2d/{n}/manual_time"); m = gbs(f"BM_five_op_meld/{n}/manual_time")
    t = gbs(f"BM_five_op_thrust_unfused/{n}/manual_time")
    print(f"{n:>12} {c:>10.0f} {m:>10.0f} {100*m/peak if peak else 0:>7.1f} {100*m/c:>7.1f} {t:>12.0f} {m/t:>11.2f}x")
for n in [1 << 24, 1 << 28]:
    tm = rows[f"BM_sum_xz_meld/{n}/manual_time"]["real_time"]
    ti = rows[f"BM_sum_xz_thrust_inner_product/{n}/manual_time"]["real_time"]
    tc = rows[f"BM_sum_cub_plain/{n}/manual_time"]["real_time"]
    print(f"sum(x*z) N={n}: meld {tm:.1f} us, thrust::inner_product {ti:.1f} us, CUB Sum (plain, reads half the bytes) {tc:.1f} us, meld/CUB-per-byte {tm/(2*tc):.2f}")
for name, b in rows.items():
    if name.startswith("BM_gemm"):
        print(f"GEMM {b.get('label','')} 8192: {b['TFLOP/s']/1e12 if b['TFLOP/s'] > 1e6 else b['TFLOP/s']:.1f} TFLOP/s")
PY
echo "=== done in $((SECONDS - start)) s"
exit $status

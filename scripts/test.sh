#!/usr/bin/env bash
# Builds and runs meld's whole test suite: where the CUDA toolkit is installed, every CUDA target
# (GPU tests run where there is a GPU, else report skipped), then g++ release (with MPI, the
# examples and benchmarks), clang++ with AddressSanitizer + UndefinedBehaviorSanitizer (the second
# compiler: clang instruments in less than half of g++'s compile time), the parameter server's
# MPI tests built with clang++ as well (clang-ps), g++ with ThreadSanitizer (threading tests, the
# asynchronous instantiations, and the emulated device's programs that run streams, events, pools
# and NCCL ranks concurrently), and the CUDA backend on the emulated device under
# AddressSanitizer + UndefinedBehaviorSanitizer (emu). Installs
# missing packages first. Every configuration runs even when an earlier one fails; the last line
# totals them all: `N passed, M failed, K skipped` (a configuration that does not build counts as
# one failed test). Exits non-zero if anything failed.
#   scripts/test.sh            everything
#   scripts/test.sh release    one configuration (cuda, release, clang-ps, asan, tsan, emu; or
#                              clang: an optimized clang++ build, or emu-tsan: all of the
#                              emulated device's programs and its example under ThreadSanitizer,
#                              not part of the default set)
set -uo pipefail
cd "$(dirname "$0")/.."
jobs=${MELD_JOBS:-$(nproc)}
scripts/install-deps.sh || exit 1

passed=0 failed=0 skipped=0
summary=()
count() {  # count <junit file> <attribute>
  sed -n "s/^[[:space:]]*$2=\"\([0-9]*\)\".*/\1/p" "$1" | head -1
}
run() {  # run <preset>: configure, build, test; adds to the totals
  local start=$SECONDS junit="$PWD/build/junit-$1.xml"
  echo "=== $1: configure and build"
  rm -f "$junit"
  # g++'s collector running less often (CMakeLists.txt: MELD_GCC_LARGER_HEAP): 12 % less compile
  # time, for memory that $jobs units at once have here.
  local args=(-DMELD_GCC_LARGER_HEAP=ON)
  if [ "$1" = release ]; then args+=("-DMELD_BUILD_BENCHMARKS=$release_benchmarks"); fi
  if ! cmake --preset "$1" "${args[@]}" > "build/configure-$1.log" 2>&1; then
    cat "build/configure-$1.log"
    failed=$((failed + 1)) summary+=("$1: configure failed")
    return
  fi
  rm -f "build/configure-$1.log"
  if ! cmake --build --preset "$1" -j "$jobs"; then
    failed=$((failed + 1)) summary+=("$1: build failed")
    return
  fi
  echo "=== $1: test"
  # One test more than cores: the MPI, parameter-server and cluster tests spend much of their time
  # waiting (on timeouts they test, on other ranks), which left a core idle (release's tests: 161 s
  # at -j2, 136 s at -j3 on 2 cores).
  ctest --preset "$1" -j "$((jobs + 1))" --output-junit "$junit"
  if [ ! -f "$junit" ]; then
    failed=$((failed + 1)) summary+=("$1: ctest wrote no results")
    return
  fi
  local t f s
  t=$(count "$junit" tests) f=$(count "$junit" failures) s=$(count "$junit" skipped)
  passed=$((passed + t - f - s)) failed=$((failed + f)) skipped=$((skipped + s))
  summary+=("$1: $((t - f - s)) passed, $f failed, $s skipped in $((SECONDS - start)) s")
  echo "=== $1: done in $((SECONDS - start)) s"
}

# CUDA first: without a GPU its tests all report skipped, and the suites that run come after it.
default="release clang-ps asan tsan emu"
if command -v nvcc > /dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then default="cuda $default"; fi
# The benchmarks compile once: at -O0 in the cuda configuration where it runs (a compile check;
# their timings come from -O3 builds: scripts/bench.sh, or the release preset on its own), else
# in release.
configs=${*:-$default}
release_benchmarks=ON
if [[ " $configs " == *" cuda "* ]]; then release_benchmarks=OFF; fi
mkdir -p build
for c in $configs; do run "$c"; done
echo "=== summary"
printf '%s\n' "${summary[@]}"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]

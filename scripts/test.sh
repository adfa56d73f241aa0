#!/usr/bin/env bash
# Builds and runs meld's whole test suite: g++ release, clang++, AddressSanitizer +
# UndefinedBehaviorSanitizer, ThreadSanitizer (threading tests), and, where the CUDA toolkit is
# installed, every CUDA target (GPU tests run where there is a GPU, else report skipped).
# Installs missing packages first.
#   scripts/test.sh            everything
#   scripts/test.sh release    one configuration (release, clang, asan, tsan, cuda)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${MELD_JOBS:-$(nproc)}
scripts/install-deps.sh

run() {  # run <preset>: configure, build, test
  local start=$SECONDS
  echo "=== $1: configure and build"
  cmake --preset "$1" > /dev/null
  cmake --build --preset "$1" -j "$jobs"
  echo "=== $1: test"
  ctest --preset "$1" -j "$jobs"
  echo "=== $1: done in $((SECONDS - start)) s"
}

default="release clang asan tsan"
# The CUDA configuration compiles every CUDA target; its GPU tests report "skipped" without a GPU.
if command -v nvcc > /dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then default="$default cuda"; fi
configs=("${@:-$default}")
for c in ${configs[@]}; do run "$c"; done
echo "=== all passed"

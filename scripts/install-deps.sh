#!/usr/bin/env bash
# Installs what meld's build, tests, examples and benchmarks need on Debian 12 (or Ubuntu),
# skipping what is already there. Runs apt-get directly as root, through sudo otherwise.
set -euo pipefail

packages=(
  cmake ninja-build g++ clang pkg-config  # toolchain (clang: the second compiler CI checks)
  libclang-rt-14-dev                      # clang's sanitizer and libFuzzer runtimes (asan, fuzz tests)
  doxygen python3-venv                    # the API reference (scripts/docs.sh); the packaging checks
  libxsimd-dev                            # the one required dependency
  catch2 libbenchmark-dev                 # tests and benchmarks
  zlib1g-dev dataset-fashion-mnist        # the training example and its data
  libcli11-dev                            # the training example's command line
  libopenmpi-dev openmpi-bin              # the MPI communicator
  libopenblas-dev libeigen3-dev libxtensor-dev  # the peers the benchmarks compare against
  python3-numpy python3-matplotlib        # reference results and training plots
  python3-torch                           # autograd's reference gradients (tests/autograd)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: everything is installed"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
as_root=()
[ "$(id -u)" -eq 0 ] || as_root=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
echo "install-deps: done"

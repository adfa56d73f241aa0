#!/usr/bin/env bash
# Checks the vcpkg overlay port (ports/meld) and the project manifest (vcpkg.json) where the
# vcpkg tool is not available:
#  1. both manifests validate against vcpkg's published JSON schema (python jsonschema from PyPI,
#     in a virtual environment; the schema is in scripts/vcpkg/schema/);
#  2. the portfile runs through plain CMake (scripts/vcpkg/emulate.cmake: vcpkg_cmake_configure,
#     vcpkg_cmake_install, vcpkg_cmake_config_fixup, ...) into a fresh package folder, with the
#     features this machine can build (mpi where MPI is installed, blas where a CBLAS is);
#  3. a consumer (tests/package/consumer) builds and runs against that folder with
#     find_package(meld CONFIG REQUIRED [COMPONENTS mpi]).
#   scripts/check-vcpkg.sh [feature...]    (default: the ones available; work in build/check-vcpkg)
# Exits 77 (skipped) when jsonschema cannot be installed (no PyPI).
set -euo pipefail
cd "$(dirname "$0")/.."
work=${MELD_CHECK_DIR:-$PWD/build/check-vcpkg}
venv=${MELD_TOOLS_VENV:-$PWD/build/tools-venv}
cxx=${CXX:-c++}
skip() { echo "check-vcpkg: SKIPPED: $*"; exit 77; }
fail() { echo "check-vcpkg: FAILED: $*"; exit 1; }

# shellcheck source=scripts/tools-venv.sh
source scripts/tools-venv.sh
tools_venv "$venv" jsonschema || skip "cannot install jsonschema from PyPI"
"$venv/bin/python" scripts/vcpkg/validate.py vcpkg.json ports/meld/vcpkg.json || fail "schema"

if [ $# -gt 0 ]; then
  features=("$@")
else
  features=()
  command -v mpicxx > /dev/null && features+=(mpi)
  ldconfig -p 2>/dev/null | grep -q -E 'lib(cblas|openblas|blis)\.so' && features+=(blas)
fi
rm -rf "$work"
mkdir -p "$work"
echo "check-vcpkg: the portfile through plain CMake, features: core ${features[*]}"
feature_list=$(IFS=';'; echo "core;${features[*]}")
cmake -DPORT_DIR=ports/meld -DPACKAGES_DIR="$work/packages/meld_x64-linux" \
      -DBUILDTREES_DIR="$work/buildtrees/meld" "-DFEATURES=$feature_list" -DCXX="$cxx" \
      -P scripts/vcpkg/emulate.cmake > "$work/port.log" 2>&1 || { cat "$work/port.log"; fail "portfile"; }
pkg=$work/packages/meld_x64-linux
for f in share/meld/meldConfig.cmake share/meld/meldTargets.cmake share/meld/usage \
         share/meld/copyright include/meld/meld.hpp include/meld/version.hpp; do
  [ -f "$pkg/$f" ] || fail "the package lacks $f"
done
[ ! -e "$pkg/lib/cmake" ] && [ ! -e "$pkg/debug" ] || fail "lib/cmake or debug/ left in the package"
cmp -s "$pkg/share/meld/copyright" LICENSE || fail "share/meld/copyright is not LICENSE"

components=""
for f in "${features[@]}"; do [ "$f" = mpi ] && components=mpi; done
echo "check-vcpkg: a consumer against the package (COMPONENTS ${components:-none})"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
{
  cmake -S tests/package/consumer -B "$work/consumer" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" \
        -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$pkg" -DMELD_COMPONENTS="$components" &&
  cmake --build "$work/consumer" && "$work/consumer/consumer" &&
  if [ -n "$components" ]; then "$work/consumer/consumer_mpi"; fi
} > "$work/consumer.log" 2>&1 || { cat "$work/consumer.log"; fail "consumer"; }
grep -q "consumer ok" "$work/consumer.log" || fail "the consumer printed no result"
grep -q "meld_DIR:PATH=$pkg/share/meld" "$work/consumer/CMakeCache.txt" ||
  fail "the consumer did not find meld in the package: $(grep meld_DIR "$work/consumer/CMakeCache.txt")"
echo "check-vcpkg: passed (manifests valid, port installed, consumer built and ran)"

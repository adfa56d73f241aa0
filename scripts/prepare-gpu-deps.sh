#!/usr/bin/env bash
# Copies the header-only and small dependencies of the GPU check (xsimd, xtl, Catch2, Google
# Benchmark, zlib for the training example) and the Fashion-MNIST files (30 MB) from this Debian
# machine into .deps/ (ignored by git), keeping Debian's layout so that their CMake package files
# find everything relative to .deps. For machines that have CUDA but not these packages: carry
# .deps with the working tree, then run scripts/gpu-check.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
arch=lib/x86_64-linux-gnu
rm -rf .deps && mkdir -p .deps/include .deps/$arch/cmake .deps/lib/cmake
cp -r /usr/include/xsimd /usr/include/catch2 /usr/include/benchmark .deps/include/
[ -d /usr/include/xtl ] && cp -r /usr/include/xtl .deps/include/ && cp -r /usr/share/cmake/xtl .deps/lib/cmake/
cp -r /usr/$arch/cmake/xsimd /usr/$arch/cmake/benchmark .deps/$arch/cmake/
cp -r /usr/lib/cmake/Catch2 .deps/lib/cmake/
# Catch2's package file names its main library (Debian's Catch2 2.x) relative to lib/.
cp -a /usr/lib/libCatch2*.a .deps/lib/ 2>/dev/null || true
cp -a /usr/$arch/libbenchmark*.so* .deps/$arch/ 2>/dev/null || true
cp -a /usr/$arch/libbenchmark*.a .deps/$arch/ 2>/dev/null || true
cp /usr/include/zlib.h /usr/include/zconf.h .deps/include/ 2>/dev/null || true
cp -a /usr/$arch/libz.so* /usr/$arch/libz.a .deps/$arch/ 2>/dev/null || true
[ -d /usr/share/datasets/fashion-mnist ] && cp -r /usr/share/datasets/fashion-mnist .deps/
du -sh .deps

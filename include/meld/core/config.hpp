// Build-wide constants and portability macros. Everything else in meld includes this first.
#pragma once

#include <cstddef>
#include <cstdint>

// MELD_HD marks functions that run on the host and, when compiled by nvcc, on the device too.
// Expression functors use it so that one definition serves the CPU and the CUDA evaluators.
#if defined(__CUDACC__)
#define MELD_HD __host__ __device__
#else
#define MELD_HD
#endif

// MELD_CUDA_BACKEND: this translation unit gets the CUDA backend: the build enables it
// (MELD_ENABLE_CUDA) and the file is compiled by nvcc, or by the host compiler against the emulated
// device of meld's tests (MELD_CUDA_EMU; backend/cuda/platform.hpp is where the two differ).
#if defined(MELD_ENABLE_CUDA) && (defined(__CUDACC__) || defined(MELD_CUDA_EMU))
#define MELD_CUDA_BACKEND 1
#endif

// MELD_WITH_MPI and MELD_WITH_NCCL are the former names of MELD_ENABLE_MPI and MELD_ENABLE_NCCL
// (every build switch is MELD_ENABLE_*): a build that still defines them by hand gets the
// communicators for one more release.
#if defined(MELD_WITH_MPI) && !defined(MELD_ENABLE_MPI)
#define MELD_ENABLE_MPI 1
#endif
#if defined(MELD_WITH_NCCL) && !defined(MELD_ENABLE_NCCL)
#define MELD_ENABLE_NCCL 1
#endif

#if defined(_MSC_VER)
#define MELD_INLINE __forceinline
#define MELD_NOINLINE __declspec(noinline)
#else
#define MELD_INLINE inline __attribute__((always_inline))
#define MELD_NOINLINE __attribute__((noinline))
#endif

// MELD_ONCE: compiled once, not inlined and (GCC) not cloned for constant arguments: the
// type-erased, non-template parts of the evaluators exist so that a program compiles them once.
#if defined(__GNUC__) && !defined(__clang__)
#define MELD_ONCE __attribute__((noinline, noclone))
#else
#define MELD_ONCE MELD_NOINLINE
#endif

// The runtime: the non-template parts of meld (the thread pool, host memory, iteration plans, the
// type-erased loops, error messages). By default every translation unit that uses a part compiles
// it, as inline functions (header-only). With MELD_COMPILED_RUNTIME defined (linking the CMake
// target meld::runtime defines it), the headers only declare it and the meld_runtime library
// (src/runtime.cpp) holds the one definition: each translation unit skips the code generation of
// the runtime, about 40 % of what a one-expression program compiles (benchmarks/RESULTS.md). A
// program's translation units must all use the same mode.
// A header declares its part of the runtime and includes its definitions, `name-inl.hpp`, under
// one `#if MELD_RUNTIME_DEFINITIONS` at its end. The declarations carry no `inline` and no
// `noinline` (g++ rejects a declaration with both, and either one before a definition with the
// other): the definitions carry MELD_RUNTIME and their inlining attributes.
//   MELD_RUNTIME              on the definitions: `inline` header-only, nothing in the library
//   MELD_RUNTIME_DEFINITIONS  1 where the definitions are compiled: header-only, or the library
#if defined(MELD_COMPILED_RUNTIME)
#define MELD_RUNTIME
#if defined(MELD_BUILDING_RUNTIME)
#define MELD_RUNTIME_DEFINITIONS 1
#else
#define MELD_RUNTIME_DEFINITIONS 0
#endif
#else
#define MELD_RUNTIME inline
#define MELD_RUNTIME_DEFINITIONS 1
#endif

namespace meld {

/// \addtogroup core
/// @{

/// Signed, so that strides can be negative (reversed slices) and index arithmetic never wraps.
using index_t = std::int64_t;

/// Tensors have rank 0..max_rank. Shapes and strides live in fixed-size arrays of this capacity,
/// which keeps them allocation-free and trivially copyable to a GPU.
inline constexpr int max_rank = 8;

/// Owning storage is aligned to a cache line; also the unit that parallel chunks are aligned to,
/// so that two threads never write into one line.
inline constexpr std::size_t cache_line = 64;

/// @}

}  // namespace meld

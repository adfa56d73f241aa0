// xsimd, included once for all of meld's CPU evaluator.
#pragma once

#include "../../core/gcc12_warnings.hpp"

// GCC 12 reports its own AVX-512 intrinsics (the _mm512_undefined_* that xsimd's math uses) as
// uninitialized in any function they are inlined into (GCC PR 105593, fixed in GCC 13). The
// warning state that counts is the one where xsimd's functions are defined, so it is silenced
// around this include (and around meld's evaluator headers, where they are inlined), leaving users
// who build with -Werror unaffected.
// The order of these three lines is the point: keep clang-format from sorting them.
// clang-format off
MELD_GCC12_WARNINGS_OFF
#include <xsimd/xsimd.hpp>
MELD_GCC12_WARNINGS_ON
// clang-format on

namespace meld::detail {

// The instruction set of meld's CPU kernels: the best that the target supports, as xsimd picks
// it, with one exception. xsimd 8.1's AVX-512BW select on integer batches reaches intrinsics that
// GCC defines as casting macros when it does not optimize (-O0), which fail to compile with
// xsimd's class-type operands; unoptimized GCC builds (Debug) use the AVX-512DQ kernels instead.
#if defined(__GNUC__) && !defined(__clang__) && !defined(__OPTIMIZE__) && XSIMD_WITH_AVX512BW
using simd_arch = xsimd::avx512dq;
#else
using simd_arch = xsimd::default_arch;
#endif

// The SIMD batch of T. In files compiled by nvcc the CPU evaluator runs scalar loops (vectorized
// by the host compiler where it can): nvcc would also compile the __host__ __device__ functors for
// xsimd's vector types as device code, which it cannot.
#if defined(__CUDACC__)
template <class T>
using batch_for = void;
#else
template <class T>
using batch_for = xsimd::batch<T, simd_arch>;
#endif

}  // namespace meld::detail

// Products of bfloat16 operands into a float C, accumulating in float. Where the CPU has
// AVX512_BF16 (the build targets it: __AVX512BF16__), a micro-kernel of vdpbf16ps, which multiplies
// two pairs of bfloat16 values exactly and adds both products to a float accumulator: twice the
// multiply-adds of a float FMA per instruction, from operands of half the bytes. gemm_blocked
// (gemm.hpp) drives it with the float kernel's blocking, threads and edge tiles. Elsewhere the
// operands are widened to float and float's kernel multiplies them (matmul.hpp).
//
// An operand is bfloat16 memory, or float memory that the packing rounds to bfloat16 (to nearest,
// ties to even) as it copies it: `cast<bfloat16>(x)` of a float tensor x is read through x, with
// no bfloat16 copy of it (matmul.hpp).
//
// Packing groups the steps of k in pairs: a packed word holds two consecutive elements along k
// (the even one in the low half, as vdpbf16ps reads them); a block of odd length ends with a zero.
//
//   A panel (MR x kc): word (r, q) at a[q * MR + r]   -- broadcast to every lane
//   B panel (kc x NR): word (q, j) at b[q * NR + j]   -- NR columns side by side
//
// The instruction treats subnormal bfloat16 inputs as zero and flushes subnormal results to zero
// (as the hardware defines it); products of normal values are those of the float kernel.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../../core/bfloat16.hpp"
#include "../../core/config.hpp"
#include "gemm.hpp"

#if defined(__AVX512BF16__) && defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "../../core/gcc12_warnings.hpp"  // push

namespace meld::detail::cpu_eval {

#if defined(__AVX512BF16__) && defined(__AVX512F__)

inline constexpr bool has_bf16_dot = true;

struct bf16_dot_kernel {
  using packed = std::uint32_t;
  static constexpr int mr = 6, nv = 4, nr = nv * 16;  // as float's AVX-512 tile: 24 accumulators
  static constexpr index_t steps(index_t kc) { return (kc + 1) / 2; }

  // The bfloat16 bits of an operand's element.
  static std::uint32_t bits(bfloat16 x) { return x.bits; }
  static std::uint32_t bits(float x) { return bfloat16(x).bits; }

  // Elements p and p + 1 of a strided sequence of k as one word (past the end: zero).
  template <class E>
  static std::uint32_t pair(const E* x, index_t stride, index_t p, index_t k) {
    const std::uint32_t hi = p + 1 < k ? bits(x[(p + 1) * stride]) : 0u;
    return bits(x[p * stride]) | hi << 16;
  }
  // The same for a contiguous sequence (bfloat16: one load).
  template <class E>
  static std::uint32_t pair(const E* x, index_t p, index_t k) {
    if constexpr (std::is_same_v<E, bfloat16>) {
      if (p + 1 < k) {
        std::uint32_t w;
        std::memcpy(&w, x + p, sizeof w);
        return w;
      }
    }
    return pair(x, 1, p, k);
  }
  // 16 consecutive elements as the low halves of 16 words.
  static __m512i widen16(const bfloat16* x) {
    return _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
  }
  static __m512i widen16(const float* x) {  // rounded to nearest even, as bfloat16(float)
    return _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x)));
  }

  template <class E>
  static void pack_a(const E* a, index_t rs, index_t cs, index_t rows, index_t kc,
                     float /*alpha: applied to the accumulators*/, std::uint32_t* to) {
    const index_t n = steps(kc);
    if (rows == mr && cs == 1) {
      // Row-major A: a cache line of each row at a time (as float's pack_a_panel).
      constexpr index_t line = 64 / (2 * sizeof(E));
      for (index_t q0 = 0; q0 < n; q0 += line) {
        const index_t q1 = std::min(n, q0 + line);
        for (index_t r = 0; r < mr; ++r)
          for (index_t q = q0; q < q1; ++q) to[q * mr + r] = pair(a + r * rs, 2 * q, kc);
      }
      return;
    }
    for (index_t q = 0; q < n; ++q, to += mr)
      for (index_t r = 0; r < mr; ++r) to[r] = r < rows ? pair(a + r * rs, cs, 2 * q, kc) : 0u;
  }

  template <class E>
  static void pack_b(const E* b, index_t rs, index_t cs, index_t cols, index_t kc,
                     std::uint32_t* to) {
    const index_t n = steps(kc);
    if (cols == nr && cs == 1) {
      // Row-major B: two rows at a time, interleaved in registers (the even row's element in the
      // low half of each word).
      for (index_t q = 0; q < n; ++q) {
        const E* even = b + 2 * q * rs;
        const bool odd = 2 * q + 1 < kc;
        unrolled<nv>([&](auto v) {
          const __m512i lo = widen16(even + v * 16);
          const __m512i hi =
              odd ? _mm512_slli_epi32(widen16(even + rs + v * 16), 16) : _mm512_setzero_si512();
          _mm512_store_si512(to + q * nr + v * 16, _mm512_or_si512(lo, hi));
        });
      }
      return;
    }
    if (rs == 1) {
      // Column-major B (a transposed view, as the weights of a linear layer's forward): each
      // pair is one load; a cache line of each column at a time.
      constexpr index_t line = 64 / (2 * sizeof(E));
      for (index_t q0 = 0; q0 < n; q0 += line) {
        const index_t q1 = std::min(n, q0 + line);
        for (index_t j = 0; j < nr; ++j)
          for (index_t q = q0; q < q1; ++q)
            to[q * nr + j] = j < cols ? pair(b + j * cs, 2 * q, kc) : 0u;
      }
      return;
    }
    for (index_t q = 0; q < n; ++q)
      for (index_t j = 0; j < nr; ++j)
        to[q * nr + j] = j < cols ? pair(b + j * cs, rs, 2 * q, kc) : 0u;
  }

  // C (MR x NR at c, row stride ldc) = alpha A_panel B_panel + beta C over `steps` pairs of k;
  // beta == 0 writes C without reading it.
  MELD_NOINLINE static void multiply(index_t steps, const std::uint32_t* a, const std::uint32_t* b,
                                     float alpha, float beta, float* c, index_t ldc) {
#if defined(__GNUC__)
    for (int r = 0; r < mr; ++r) __builtin_prefetch(c + r * ldc, 1, 3);
#endif
    __m512 acc[mr][nv];
    unrolled<mr>([&](auto r) { unrolled<nv>([&](auto v) { acc[r][v] = _mm512_setzero_ps(); }); });
    for (index_t q = 0; q < steps; ++q) {
      __m512bh bv[nv];
      unrolled<nv>([&](auto v) { bv[v] = (__m512bh)_mm512_load_si512(b + v * 16); });
      unrolled<mr>([&](auto r) {
        const __m512bh ar = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[r]));
        unrolled<nv>([&](auto v) { acc[r][v] = _mm512_dpbf16_ps(acc[r][v], ar, bv[v]); });
      });
      a += mr;
      b += nr;
    }
    const __m512 scale = _mm512_set1_ps(alpha), keep = _mm512_set1_ps(beta);
    unrolled<mr>([&](auto r) {
      unrolled<nv>([&](auto v) {
        float* to = c + r * ldc + v * 16;
        const __m512 ab = _mm512_mul_ps(scale, acc[r][v]);  // exact for alpha == 1
        _mm512_storeu_ps(to, beta == 0.f ? ab : _mm512_fmadd_ps(keep, _mm512_loadu_ps(to), ab));
      });
    });
  }
};

// c = alpha a b + beta c for operands read as bfloat16 (bfloat16 memory, or float rounded to
// bfloat16) and a float c, with gemm's semantics (gemm.hpp): alpha == 0 or k == 0 reads neither
// operand, beta == 0 does not read c. (Without vdpbf16ps, matmul.hpp widens the operands to float
// and never calls it.)
template <class SA, class SB>
void gemm_bf16(float alpha, matrix_ref<const SA> a, matrix_ref<const SB> b, float beta,
               matrix_ref<float> c) {
  const index_t m = c.rows, n = c.cols, k = a.cols;
  if (m == 0 || n == 0) return;
  if (k == 0 || alpha == 0.f) return gemm_scale(beta, c);
  // The kernel stores rows of C: a column-major C is computed as C^T = B^T A^T.
  if ((c.cs != 1 && c.rs == 1) || (n == 1 && m > 1))
    return gemm_bf16(alpha, b.transposed(), a.transposed(), beta, c.transposed());
  if (const index_t work = m * n * k; work >= gemm_small_work) {
    const int threads =
        work < gemm_parallel_work || thread_pool::in_task() ? 1 : thread_pool::global().size();
    return gemm_blocked<bf16_dot_kernel>(
        alpha, a, b, beta, c, default_gemm_blocking<bfloat16, bf16_dot_kernel>(), threads);
  }
  // A tiny product (m n k < gemm_small_work, so that m k and k n fit on the stack): the operands
  // as bfloat16 values, widened to float, through float's gemm.
  std::array<float, gemm_small_work> wa, wb;
  for (index_t i = 0; i < m; ++i)
    for (index_t p = 0; p < k; ++p) wa[std::size_t(i * k + p)] = float(bfloat16(a(i, p)));
  for (index_t p = 0; p < k; ++p)
    for (index_t j = 0; j < n; ++j) wb[std::size_t(p * n + j)] = float(bfloat16(b(p, j)));
  gemm<float>(alpha, {wa.data(), m, k, k, 1}, {wb.data(), k, n, n, 1}, beta, c);
}

#else

inline constexpr bool has_bf16_dot = false;

#endif

}  // namespace meld::detail::cpu_eval

#include "../../core/gcc12_warnings.hpp"  // pop

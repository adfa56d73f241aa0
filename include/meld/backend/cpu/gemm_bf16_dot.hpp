// The vdpbf16ps micro-kernel for products of bfloat16 operands into a float C (gemm_bf16.hpp
// chooses it where the build targets AVX512_BF16: __AVX512BF16__), and the packing of k in pairs
// that it shares with the AMX kernel (gemm_bf16_amx.hpp). vdpbf16ps multiplies two pairs of
// bfloat16 values exactly and adds both products to a float accumulator: twice the multiply-adds
// of a float FMA per instruction, from operands of half the bytes, on CPUs that issue it as often
// as an FMA (AMD's Zen 4 and 5; Intel's Sapphire Rapids issues it on one port, where it gains
// nothing over float: benchmarks/RESULTS.md).
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

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../../core/bfloat16.hpp"
#include "../../core/config.hpp"
#include "../../core/gcc12_warnings.hpp"
#include "gemm.hpp"

#if defined(__AVX512BF16__) && defined(__AVX512F__)
#include <immintrin.h>
#endif

MELD_GCC12_WARNINGS_OFF

namespace meld::detail::cpu_eval {

#if defined(__AVX512BF16__) && defined(__AVX512F__)

inline constexpr bool has_bf16_dot = true;

// Words of two bfloat16 elements consecutive along k, and B panels NV x 16 words wide.
template <int NV>
struct bf16_pair_packing {
  using packed = std::uint32_t;
  static constexpr int nv = NV, nr = nv * 16;

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

  // 32 consecutive elements along k as 16 words (float: rounded to nearest even).
  static __m512i words16(const bfloat16* x) { return _mm512_loadu_si512(x); }
  static __m512i words16(const float* x) {
    return (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + 16), _mm512_loadu_ps(x));
  }
  // The words of pairs of k-rows 2 q and 2 q + 1 (16 consecutive elements each, at x and x + rs).
  template <class E>
  static __m512i interleave16(const E* x, index_t rs) {
    return _mm512_or_si512(widen16(x), _mm512_slli_epi32(widen16(x + rs), 16));
  }

  // B (kc x cols, cols <= NR) as (kc + 1) / 2 rows of NR words; columns past cols are zeros.
  template <class E>
  static void pack_b(const E* b, index_t rs, index_t cs, index_t cols, index_t kc,
                     std::uint32_t* to) {
    const index_t n = (kc + 1) / 2;
    if (cols == nr && cs == 1) {
      // Row-major B: two rows at a time, interleaved in registers (the even row's element in the
      // low half of each word).
      for (index_t q = 0; q < n; ++q) {
        const E* even = b + 2 * q * rs;
        const bool odd = 2 * q + 1 < kc;
        unrolled<nv>([&](auto v) {
          _mm512_store_si512(to + q * nr + v * 16,
                             odd ? interleave16(even + v * 16, rs) : widen16(even + v * 16));
        });
      }
      return;
    }
    if (rs == 1) {
      // Column-major B (a transposed view, as the weights of a linear layer's forward): 16
      // columns of 16 pairs are read as 16 rows of words and transposed in registers; the rest
      // a pair at a time, a cache line of each column at a time.
      index_t q_done = 0;
      if (cols == nr) {
        q_done = kc / 32 * 16;
        for (index_t q0 = 0; q0 < q_done; q0 += 16)
          for (index_t j0 = 0; j0 < nr; j0 += 16) {
            __m512i v[16];
            for (int j = 0; j < 16; ++j) v[j] = words16(b + (j0 + j) * cs + 2 * q0);
            transpose16x16(v);
            for (int q = 0; q < 16; ++q) _mm512_store_si512(to + (q0 + q) * nr + j0, v[q]);
          }
      }
      constexpr index_t line = 64 / (2 * sizeof(E));
      for (index_t q0 = q_done; q0 < n; q0 += line) {
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
};

struct bf16_dot_kernel : bf16_pair_packing<4> {
  static constexpr int mr = 6;  // 6 x 4 vectors: float's AVX-512 tile, 24 accumulators
  static constexpr index_t steps(index_t kc) { return (kc + 1) / 2; }

  template <class E>
  static void pack_a(const E* a, index_t rs, index_t cs, index_t rows, index_t kc,
                     float /*alpha: applied to the accumulators*/, std::uint32_t* to) {
    const index_t n = steps(kc);
    if (std::is_same_v<E, float> && rows == mr && cs == 1) {
      // Row-major float A: 16 pairs of a row rounded by one vcvtne2ps2bf16, then spread down the
      // panel's column, where pair() rounds an element at a time (a bf16 convolution's weight
      // gradient packs its float output gradient so: 2.1 % of a bf16 LeNet step's profile
      // before, under 1.2 % after); the pairs past the last whole 32 elements as below.
      const index_t whole = kc / 32 * 16;
      for (index_t r = 0; r < mr; ++r) {
        const E* row = a + r * rs;
        alignas(64) std::uint32_t words[16];
        for (index_t q0 = 0; q0 < whole; q0 += 16) {
          _mm512_store_si512(words, words16(row + 2 * q0));
          for (index_t i = 0; i < 16; ++i) to[(q0 + i) * mr + r] = words[i];
        }
        for (index_t q = whole; q < n; ++q) to[q * mr + r] = pair(row, 2 * q, kc);
      }
      return;
    }
    if (rows == mr && rs == 1) {
      // Column-major A (a transposed operand: a linear layer's output gradient in its weight
      // gradient, g^T x, or a convolution's weight in its input gradient, W^T g): a step's two
      // columns of the panel's six rows as bfloat16 (float: rounded by one conversion each),
      // interleaved into six words. Element by element, this packing took 3.8 % of a bf16 MLP
      // step's profile; 1.2 % so.
      static_assert(mr == 6, "a step's words are stored as four, then two");
      const auto column = [&](index_t p) {
        if (p >= kc) return _mm_setzero_si128();
        const E* x = a + p * cs;
        if constexpr (std::is_same_v<E, float>) {
          constexpr __mmask16 panel_rows = (1u << mr) - 1;
          return _mm256_castsi256_si128(
              (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(panel_rows, x)));
        } else {
          long long four;
          int two;
          std::memcpy(&four, x, sizeof four);
          std::memcpy(&two, x + 4, sizeof two);
          return _mm_insert_epi32(_mm_cvtsi64_si128(four), two, 2);
        }
      };
      for (index_t q = 0; q < n; ++q) {
        const __m128i even = column(2 * q), odd = column(2 * q + 1);
        std::uint32_t* words = to + q * mr;
        _mm_storeu_si128(reinterpret_cast<__m128i*>(words), _mm_unpacklo_epi16(even, odd));
        _mm_storel_epi64(reinterpret_cast<__m128i*>(words + 4), _mm_unpackhi_epi16(even, odd));
      }
      return;
    }
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

  // bfloat16 A with contiguous rows is read where it is (gemm_blocked: whole pairs only, k and
  // its blocks even): a step's pair of k is one word of the row. Packing it took 4 % of a bf16
  // MLP step's profile beside the kernel's 47 %: its forward products have 128 - 256 columns, at
  // most four panels of B to share each packed panel of A.
  static constexpr bool reads_bfloat16_a_in_place = true;

  // C (MR x NR at c, row stride ldc) = alpha A_panel B_panel + beta C over `steps` pairs of k;
  // beta == 0 writes C without reading it.
  MELD_NOINLINE static void multiply(index_t steps, const std::uint32_t* a, const std::uint32_t* b,
                                     float alpha, float beta, float* c, index_t ldc) {
    multiply_rows(steps, a, 1, mr, b, alpha, beta, c, ldc);
  }
  // The same with A where it is: the word of row r and step q at a + r * a_rs + q * a_qs
  // (elements of a).
  MELD_NOINLINE static void multiply(index_t steps, const bfloat16* a, index_t a_rs,
                                     const std::uint32_t* b, float alpha, float beta, float* c,
                                     index_t ldc) {
    multiply_rows(steps, a, a_rs, 2, b, alpha, beta, c, ldc);
  }

 private:
  template <class E>
  MELD_INLINE static void multiply_rows(index_t steps, const E* a, index_t a_rs, index_t a_qs,
                                        const std::uint32_t* b, float alpha, float beta, float* c,
                                        index_t ldc) {
#if defined(__GNUC__)
    for (int r = 0; r < mr; ++r) __builtin_prefetch(c + r * ldc, 1, 3);
#endif
    __m512 acc[mr][nv];
    unrolled<mr>([&](auto r) { unrolled<nv>([&](auto v) { acc[r][v] = _mm512_setzero_ps(); }); });
    for (index_t q = 0; q < steps; ++q) {
      __m512bh bv[nv];
      unrolled<nv>([&](auto v) { bv[v] = (__m512bh)_mm512_load_si512(b + v * 16); });
      unrolled<mr>([&](auto r) {
        int word;
        std::memcpy(&word, a + r * a_rs, sizeof word);
        const __m512bh ar = (__m512bh)_mm512_set1_epi32(word);
        unrolled<nv>([&](auto v) { acc[r][v] = _mm512_dpbf16_ps(acc[r][v], ar, bv[v]); });
      });
      a += a_qs;
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

#else

inline constexpr bool has_bf16_dot = false;

#endif

}  // namespace meld::detail::cpu_eval

MELD_GCC12_WARNINGS_ON

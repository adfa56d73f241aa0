// The inner parts of the CPU GEMM (the driver is in gemm.hpp): the register-blocked micro-kernel
// and the packing of A and B into the panels it reads.
//
// The micro-kernel keeps an MR x NR tile of C in registers (NR = NV SIMD vectors of the widest
// batch xsimd selected) and, for each of kc steps, loads NV vectors of a row of B, broadcasts MR
// elements of a column of A, and issues MR x NV fused multiply-adds. Packed panels are contiguous
// and aligned, so the loop reads two sequential streams whatever the operands' strides; it reads
// an operand in place when its own layout serves as well (gemm.hpp). The packed layouts:
//
//   A panel (MR x kc): element (r, p) at a[p * MR + r]   -- MR rows interleaved, scaled by alpha
//   B panel (kc x NR): element (p, j) at b[p * NR + j]   -- NR columns side by side
//
// Rows or columns past the matrix edge are packed as zeros, so the kernel always computes a whole
// tile; the driver then keeps the part inside C.
#pragma once

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>

#include "../../core/config.hpp"
#include "../../core/gcc12_warnings.hpp"
#include "simd.hpp"

MELD_GCC12_WARNINGS_OFF

namespace meld::detail::cpu_eval {

// f(integral_constant<int, 0>), ..., f(integral_constant<int, N - 1>): unrolled at compile time by
// any compiler, so that the accumulators of the micro-kernel are named registers, never memory.
template <class F, int... I>
MELD_INLINE void unrolled(F&& f, std::integer_sequence<int, I...>) {
  (f(std::integral_constant<int, I>{}), ...);
}
template <int N, class F>
MELD_INLINE void unrolled(F&& f) {
  unrolled(f, std::make_integer_sequence<int, N>{});
}

// The shape of the register tile for element type T on the SIMD architecture xsimd selected.
// MR x NV vectors of accumulators, plus NV vectors of B and one broadcast of A, must fit in the
// register file: 32 vector registers with AVX-512 and AArch64 NEON, 16 with SSE and AVX2.
//   32 registers: 6 x 4 vectors (24 accumulators; 6 x 64 floats with AVX-512). Measured on an
//                 AVX-512 Xeon against 12 x 2, 14 x 2 and 8 x 3 (all 24-28 accumulators): all
//                 run at the FMA peak with panels in L1, and 6 x 4 was 3-10 % faster in whole
//                 products (n = 512 to 2048): per step it loads 10 vectors against 14 for 12 x 2,
//                 and a tile of C spans 6 rows, not 12 (fewer cache sets when rows are 4 KiB
//                 apart).
//   16 registers: 6 x 2 vectors (12 accumulators; 6 x 16 floats with AVX2), the classic shape;
//                 4 x 3 measured the same (AVX2 build on the same Xeon).
template <class T, class Arch = detail::simd_arch>
struct gemm_tile {
  using batch = xsimd::batch<T, Arch>;
  static constexpr bool wide_register_file =
      std::is_base_of_v<xsimd::avx512f, Arch> || std::is_base_of_v<xsimd::neon64, Arch>;
  static constexpr int width = static_cast<int>(batch::size);
  static constexpr int nv = wide_register_file ? 4 : 2;
  static constexpr int mr = 6;
  static constexpr int nr = nv * width;
};

// C (MR x NR at c, row stride ldc, unit column stride) = A B + beta C over kc steps, where
// element (r, p) of A is at a[r * a_rs + p * a_ps] and row p of B (NR contiguous elements) at
// b + p * b_ps. Packed panels are (a_rs, a_ps) = (1, MR) and b_ps = NR; the driver passes an
// operand's own strides where it can be read in place (gemm.hpp). beta == 0 writes C without
// reading it (NaN or garbage there is ignored).
template <class T, int MR, int NV, class Arch>
MELD_NOINLINE void gemm_micro_kernel(index_t kc, const T* a, index_t a_rs, index_t a_ps, const T* b,
                                     index_t b_ps, T beta, T* c, index_t ldc) {
  using B = xsimd::batch<T, Arch>;
  constexpr int W = static_cast<int>(B::size);
  // Start fetching the tile of C now: its first use is after the whole k loop. (A plain loop:
  // GCC 12 drops __builtin_prefetch inside a generic lambda of a function template.)
#if defined(__GNUC__)
  for (int r = 0; r < MR; ++r) __builtin_prefetch(c + r * ldc, 1, 3);
#endif
  B acc[MR][NV];
  unrolled<MR>([&](auto r) { unrolled<NV>([&](auto v) { acc[r][v] = B(T(0)); }); });
  for (index_t p = 0; p < kc; ++p) {
    B bv[NV];
    unrolled<NV>([&](auto v) { bv[v] = B::load_unaligned(b + v * W); });
    unrolled<MR>([&](auto r) {
      const B ar(a[r * a_rs]);
      unrolled<NV>([&](auto v) { acc[r][v] = xsimd::fma(ar, bv[v], acc[r][v]); });
    });
    a += a_ps;
    b += b_ps;
  }
  if (beta == T(0)) {
    unrolled<MR>([&](auto r) {
      unrolled<NV>([&](auto v) { acc[r][v].store_unaligned(c + r * ldc + v * W); });
    });
  } else {  // beta C + AB in one rounding (exactly C + AB when beta is 1)
    const B bb(beta);
    unrolled<MR>([&](auto r) {
      unrolled<NV>([&](auto v) {
        T* to = c + r * ldc + v * W;
        xsimd::fma(bb, B::load_unaligned(to), acc[r][v]).store_unaligned(to);
      });
    });
  }
}

#if defined(__AVX512F__)
// 16 x 16 32-bit words transposed in registers: lane j of v[i] becomes lane i of v[j]. (The
// packings of column-major B: floats here, pairs of bfloat16 in gemm_bf16_dot.hpp, and the AMX
// kernel's column-major A.)
MELD_INLINE void transpose16x16(__m512i (&v)[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(v[i], v[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(v[i], v[i + 1]);
  }
  // Now v[4 k + m]'s 128-bit lane L holds element 4 L + m of rows 4 k to 4 k + 3.
  for (int i = 0; i < 16; i += 4) {
    v[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    v[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    v[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    v[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  // A 4 x 4 transpose of 128-bit lanes for each m.
  for (int m = 0; m < 4; ++m) {
    const __m512i s0 = _mm512_shuffle_i32x4(v[m], v[4 + m], 0x44);
    const __m512i s1 = _mm512_shuffle_i32x4(v[m], v[4 + m], 0xEE);
    const __m512i s2 = _mm512_shuffle_i32x4(v[8 + m], v[12 + m], 0x44);
    const __m512i s3 = _mm512_shuffle_i32x4(v[8 + m], v[12 + m], 0xEE);
    t[m] = _mm512_shuffle_i32x4(s0, s2, 0x88);
    t[4 + m] = _mm512_shuffle_i32x4(s0, s2, 0xDD);
    t[8 + m] = _mm512_shuffle_i32x4(s1, s3, 0x88);
    t[12 + m] = _mm512_shuffle_i32x4(s1, s3, 0xDD);
  }
  for (int i = 0; i < 16; ++i) v[i] = t[i];
}

// Six rows of 16 floats interleaved as 16 steps of an A panel: to[p * 6 + i] = r[i][p]. Rows are
// paired first (r0 r1 as 64-bit words (r0[p], r1[p]), so r2 r3 and r4 r5); each 16-float output
// vector then takes words of two pairs with one permute and the third pair's with a masked one.
MELD_INLINE void interleave6x16(const __m512 (&r)[6], float* to) {
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));
  __m512d pairs[3][2];  // [rows 2 s, 2 s + 1][steps 0-7, 8-15]
  for (int s = 0; s < 3; ++s) {
    pairs[s][0] = _mm512_castps_pd(_mm512_permutex2var_ps(r[2 * s], lo, r[2 * s + 1]));
    pairs[s][1] = _mm512_castps_pd(_mm512_permutex2var_ps(r[2 * s], hi, r[2 * s + 1]));
  }
  // Output word t of vector o (of 3 per 8 steps) is word 8 o + t of the sequence p0 p1 p2 (pairs
  // 0, 1, 2 of step 0), p0 p1 p2 (step 1), ...: step (8 o + t) / 3 of pair (8 o + t) % 3.
  const __m512i of01[3] = {_mm512_setr_epi64(0, 8, 0, 1, 9, 0, 2, 10),
                           _mm512_setr_epi64(0, 3, 11, 0, 4, 12, 0, 5),
                           _mm512_setr_epi64(13, 0, 6, 14, 0, 7, 15, 0)};
  const __m512i of2[3] = {_mm512_setr_epi64(0, 0, 0, 0, 0, 1, 0, 0),
                          _mm512_setr_epi64(2, 0, 0, 3, 0, 0, 4, 0),
                          _mm512_setr_epi64(0, 5, 0, 0, 6, 0, 0, 7)};
  constexpr __mmask8 is2[3] = {0x24, 0x49, 0x92};
  for (int h = 0; h < 2; ++h)
    for (int o = 0; o < 3; ++o) {
      const __m512d two = _mm512_permutex2var_pd(pairs[0][h], of01[o], pairs[1][h]);
      _mm512_storeu_pd(reinterpret_cast<double*>(to + (3 * h + o) * 16),
                       _mm512_mask_permutexvar_pd(two, is2[o], of2[o], pairs[2][h]));
    }
}
#endif

// Packs `rows` (<= MR) rows x kc columns of a strided A (element (i, p) at a[i * rs + p * cs])
// into one panel, times alpha; rows past `rows` are zero.
template <class T, int MR>
void pack_a_panel(const T* a, index_t rs, index_t cs, index_t rows, index_t kc, T alpha, T* to) {
  if (rows == MR && cs == 1) {
    index_t p_done = 0;
#if defined(__AVX512F__)
    // Float rows, 6 at a time (AVX-512's tile): 16 steps in registers, interleaved by permutes.
    if constexpr (std::is_same_v<T, float> && MR == 6 &&
                  std::is_base_of_v<xsimd::avx512f, detail::simd_arch>) {
      p_done = kc / 16 * 16;
      const __m512 scale = _mm512_set1_ps(alpha);
      for (index_t p0 = 0; p0 < p_done; p0 += 16) {
        __m512 r[6];
        for (int i = 0; i < 6; ++i) r[i] = _mm512_mul_ps(scale, _mm512_loadu_ps(a + i * rs + p0));
        interleave6x16(r, to + p0 * 6);
      }
    }
#endif
    // Row-major A: a cache line of each row at a time, used up at once. (Walking all MR rows one
    // column at a time revisits each line 16 times, and with a power-of-two row stride the MR
    // lines share one L1 set and evict each other between visits.)
    constexpr index_t line = 64 / sizeof(T);
    for (index_t p0 = p_done; p0 < kc; p0 += line) {
      const index_t p1 = std::min(kc, p0 + line);
      for (index_t r = 0; r < MR; ++r)
        for (index_t p = p0; p < p1; ++p) to[p * MR + r] = alpha * a[r * rs + p];
    }
  } else if (rows == MR && rs == 1) {  // column-major A (a transposed view): contiguous columns
    for (index_t p = 0; p < kc; ++p, to += MR)
      for (index_t r = 0; r < MR; ++r) to[r] = alpha * a[r + p * cs];
  } else {
    for (index_t p = 0; p < kc; ++p, to += MR)
      for (index_t r = 0; r < MR; ++r) to[r] = r < rows ? alpha * a[r * rs + p * cs] : T(0);
  }
}

// Packs kc rows x `cols` (<= NR) columns of a strided B (element (p, j) at b[p * rs + j * cs])
// into one panel; columns past `cols` are zero.
template <class T, int NR>
void pack_b_panel(const T* b, index_t rs, index_t cs, index_t cols, index_t kc, T* to) {
  using V = xsimd::batch<T, detail::simd_arch>;
  constexpr int W = static_cast<int>(V::size);
  if (cols == NR && cs == 1 && NR % W == 0) {
    // Row-major B: a contiguous row of the panel at a time, in vector registers (a memcpy call
    // per 256-byte row cost as much as the copy: the convolutions' B has millions of them).
    for (index_t p = 0; p < kc; ++p)
      unrolled<NR / W>([&](auto v) {
        V::load_unaligned(b + p * rs + v * W).store_aligned(to + p * NR + v * W);
      });
  } else if (cols == NR && cs == 1) {
    for (index_t p = 0; p < kc; ++p) std::memcpy(to + p * NR, b + p * rs, NR * sizeof(T));
  } else if (rs == 1) {
    // Column-major B (a transposed view, as a linear layer's weights in its forward product): 16
    // columns of 16 steps of 4-byte elements are read as 16 vectors and transposed in registers
    // (AVX-512); the rest a cache line of each column at a time, into as many rows of the panel.
    // (Whole columns at a time wrote the kc rows of the panel NR times over, a 256 KiB panel for
    // kc = 1024 swept 64 times out of L1; that was 15 % of a LeNet step, in the convolutions'
    // weight gradients, whose B is the transposed im2col matrix.)
    index_t p_done = 0;
#if defined(__AVX512F__)
    if constexpr (sizeof(T) == 4 && NR % 16 == 0 &&
                  std::is_base_of_v<xsimd::avx512f, typename V::arch_type>) {
      if (cols == NR) {
        p_done = kc / 16 * 16;
        for (index_t p0 = 0; p0 < p_done; p0 += 16)
          for (index_t j0 = 0; j0 < NR; j0 += 16) {
            __m512i v[16];
            for (int j = 0; j < 16; ++j)
              v[j] = _mm512_loadu_si512(reinterpret_cast<const void*>(b + (j0 + j) * cs + p0));
            transpose16x16(v);
            for (int p = 0; p < 16; ++p) _mm512_store_si512(to + (p0 + p) * NR + j0, v[p]);
          }
      }
    }
#endif
    constexpr index_t line = 64 / sizeof(T);
    for (index_t p0 = p_done; p0 < kc; p0 += line) {
      const index_t p1 = std::min(kc, p0 + line);
      for (index_t j = 0; j < cols; ++j) {
        const T* col = b + j * cs;
        for (index_t p = p0; p < p1; ++p) to[p * NR + j] = col[p];
      }
      for (index_t p = p0; p < p1; ++p)
        for (index_t j = cols; j < NR; ++j) to[p * NR + j] = T(0);
    }
  } else {
    for (index_t p = 0; p < kc; ++p)
      for (index_t j = 0; j < NR; ++j) to[p * NR + j] = j < cols ? b[p * rs + j * cs] : T(0);
  }
}

// The micro-kernel and packing of float and double for gemm_blocked (gemm.hpp): panels of T, one
// per step of k, A scaled by alpha as it is packed.
template <class T, class Tile = gemm_tile<T>>
struct packed_kernel {
  using packed = T;
  static constexpr int mr = Tile::mr, nr = Tile::nr;
  static constexpr index_t steps(index_t kc) { return kc; }
  static void pack_a(const T* a, index_t rs, index_t cs, index_t rows, index_t kc, T alpha, T* to) {
    pack_a_panel<T, mr>(a, rs, cs, rows, kc, alpha, to);
  }
  static void pack_b(const T* b, index_t rs, index_t cs, index_t cols, index_t kc, T* to) {
    pack_b_panel<T, nr>(b, rs, cs, cols, kc, to);
  }
  MELD_INLINE static void multiply(index_t steps, const T* a, const T* b, T /*alpha: packed*/,
                                   T beta, T* c, index_t ldc) {
    multiply_in_place(nr, steps, a, 1, mr, b, nr, beta, c, ldc);
  }
  // The same on operands read where they are (gemm_blocked reads A in place when alpha is 1 and
  // B when its rows are contiguous, in kernels that have this function): element (r, p) of A at
  // a[r * a_rs + p * a_ps], row p of B at b + p * b_ps; only the first `cols` columns of the tile
  // are wanted. Fewer than NR of them (an edge panel) take the kernel of as few vectors as cover
  // them: the last 16 of 784 columns cost a quarter of a full tile, not a whole one.
  MELD_INLINE static void multiply_in_place(index_t cols, index_t steps, const T* a, index_t a_rs,
                                            index_t a_ps, const T* b, index_t b_ps, T beta, T* c,
                                            index_t ldc) {
    using arch = typename Tile::batch::arch_type;
    const index_t vectors = (cols + Tile::width - 1) / Tile::width;
    if (vectors >= Tile::nv) {
      gemm_micro_kernel<T, mr, Tile::nv, arch>(steps, a, a_rs, a_ps, b, b_ps, beta, c, ldc);
      return;
    }
    unrolled<Tile::nv - 1>([&](auto v) {
      if (vectors == v + 1)
        gemm_micro_kernel<T, mr, decltype(v)::value + 1, arch>(steps, a, a_rs, a_ps, b, b_ps, beta,
                                                               c, ldc);
    });
  }
};

}  // namespace meld::detail::cpu_eval

MELD_GCC12_WARNINGS_ON

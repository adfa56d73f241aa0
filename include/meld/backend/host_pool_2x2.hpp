// 2x2 average pooling with stride 2 and no padding (LeNet's) on the host: the test for that window,
// and its rows of float planes pooled with AVX-512, for host_window.hpp's pooling loops.
#pragma once

#include <algorithm>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "window.hpp"

namespace meld::detail::host_loops {

// Whether g is a 2x2 window with stride 2 and no padding (LeNet's pooling): then each input
// position is in at most one window, and the loops below have a straight form.
inline bool is_pool_2x2(const window2d& g) {
  return g.kernel.h == 2 && g.kernel.w == 2 && g.stride.h == 2 && g.stride.w == 2 &&
         g.padding.h == 0 && g.padding.w == 0;
}

#if defined(__AVX512F__)
// 2x2 pooling of float planes a row of up to 16 outputs at a time, for rows of 8 outputs or more
// (LeNet's first pooling: 14). g++ vectorizes the forward loop below only in part (8 lanes and a
// scalar rest) and the backward not at all: for rows of 14 they took 1.8 and 2.1 x as long;
// narrower rows (LeNet's second pooling, 5) are faster there. A window's pairs of inputs come
// apart into even and odd lanes by one permutation, and backward's gradients are spread back into
// pairs the same way. The same bits as the loops: the sums from 0 in the same order, then the
// scale; backward adds g / 4, which is exact (fused with the addition or not).
struct pool_2x2_rows {
  static constexpr index_t min_outputs = 8;

  // out[0, n) = the mean of the windows of rows r0 and r1 (inputs [0, 2 n) of each).
  static void average(const float* r0, const float* r1, index_t n, float* out) {
    const __m512i even =
        _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    for (index_t o = 0; o < n; o += 16, r0 += 32, r1 += 32) {
      const index_t k = std::min<index_t>(16, n - o);
      const __mmask16 first = lanes(2 * k), second = lanes(2 * k - 16);
      const __m512 a0 = _mm512_maskz_loadu_ps(first, r0),
                   b0 = _mm512_maskz_loadu_ps(second, r0 + 16);
      const __m512 a1 = _mm512_maskz_loadu_ps(first, r1),
                   b1 = _mm512_maskz_loadu_ps(second, r1 + 16);
      __m512 sum = _mm512_add_ps(_mm512_setzero_ps(), _mm512_permutex2var_ps(a0, even, b0));
      sum = _mm512_add_ps(sum, _mm512_permutex2var_ps(a0, odd, b0));
      sum = _mm512_add_ps(sum, _mm512_permutex2var_ps(a1, even, b1));
      sum = _mm512_add_ps(sum, _mm512_permutex2var_ps(a1, odd, b1));
      _mm512_mask_storeu_ps(out + o, lanes(k), _mm512_mul_ps(sum, _mm512_set1_ps(0.25f)));
    }
  }

  // Adds grad[o] / 4 to inputs 2 o and 2 o + 1 of rows r0 and r1, o in [0, n), or with Add false
  // writes it there (0 + grad[o] / 4: the bits of adding into zeros). Every load before the
  // stores: a load whose vector overlaps a masked store before it waits for that store.
  template <bool Add = true>
  static void spread(const float* grad, index_t n, float* r0, float* r1) {
    const __m512i low = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    const __m512i high =
        _mm512_set_epi32(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8);
    const __m512 quarter = _mm512_set1_ps(0.25f);
    for (index_t o = 0; o < n; o += 16, r0 += 32, r1 += 32) {
      const index_t k = std::min<index_t>(16, n - o);
      const __mmask16 first = lanes(2 * k), second = lanes(2 * k - 16);
      const __m512 g = _mm512_maskz_loadu_ps(lanes(k), grad + o);
      const __m512 ga = _mm512_permutexvar_ps(low, g), gb = _mm512_permutexvar_ps(high, g);
      __m512 a0 = _mm512_setzero_ps(), a1 = a0, b0 = a0, b1 = a0;
      if constexpr (Add) {
        a0 = _mm512_maskz_loadu_ps(first, r0);
        a1 = _mm512_maskz_loadu_ps(first, r1);
        b0 = _mm512_maskz_loadu_ps(second, r0 + 16);
        b1 = _mm512_maskz_loadu_ps(second, r1 + 16);
      }
      _mm512_mask_storeu_ps(r0, first, _mm512_fmadd_ps(ga, quarter, a0));
      _mm512_mask_storeu_ps(r1, first, _mm512_fmadd_ps(ga, quarter, a1));
      _mm512_mask_storeu_ps(r0 + 16, second, _mm512_fmadd_ps(gb, quarter, b0));
      _mm512_mask_storeu_ps(r1 + 16, second, _mm512_fmadd_ps(gb, quarter, b1));
    }
  }

 private:
  // The first n lanes (none for n <= 0, all for n >= 16).
  static __mmask16 lanes(index_t n) {
    return n <= 0 ? 0 : n >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << n) - 1);
  }
};
#endif

}  // namespace meld::detail::host_loops

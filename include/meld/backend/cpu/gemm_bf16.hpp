// Products of bfloat16 operands into a float C, accumulating in float, where the build targets
// AVX512_BF16: the AMX kernel where the CPU and Linux allow it (gemm_bf16_amx.hpp), else the
// vdpbf16ps kernel (gemm_bf16_dot.hpp), both driven by gemm_blocked (gemm.hpp) with the float
// kernel's blocking, threads and edge tiles. Elsewhere matmul.hpp widens the operands to float and
// float's kernel multiplies them.
#pragma once

#include <array>

#include "../../core/bfloat16.hpp"
#include "../../core/config.hpp"
#include "../../core/gcc12_warnings.hpp"
#include "gemm.hpp"
#include "gemm_bf16_amx.hpp"
#include "gemm_bf16_dot.hpp"
#include "gemm_dot.hpp"

MELD_GCC12_WARNINGS_OFF

namespace meld::detail::cpu_eval {

#if defined(__AVX512BF16__) && defined(__AVX512F__)

// gemm_dot's reads of bfloat16 operands as floats: float memory rounded to bfloat16 (to nearest,
// ties to even, as the packings round it), bfloat16 memory widened. Products of two bfloat16
// values are exact in float, so the dot products add the same terms as the kernels.
struct bf16_operand_read {
  static xsimd::batch<float, simd_arch> load(const float* p) {
    return widened(_mm512_cvtneps_pbh(_mm512_loadu_ps(p)));
  }
  static xsimd::batch<float, simd_arch> load(const bfloat16* p) {
    return widened(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static float value(float x) { return float(bfloat16(x)); }
  static float value(bfloat16 x) { return float(x); }

 private:
  static __m512 widened(__m256bh x) { return widened((__m256i)x); }
  static __m512 widened(__m256i x) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(x), 16));
  }
};

// Whether c = a b (m x n, after gemm_bf16's orientation) should be dot products of the operands,
// rounded as they are read (gemm_dot): a c that fills less than half of the kernel's MR x NR tiles
// (which the packed B would be mostly zeros for) over a long k, as the weight gradient of a
// convolution with few input channels: 1 -> 20, 3 x 3, dW {20 x 9} = g {20 x 29,068} col^T, 188 -
// 193 us against 443 in AMX tiles; 6 x 25 x 10,192, 73 us against 241 - 250 (one core of the Xeon
// AMX VM, `bench_matmul --benchmark_filter=meld_bf16_step`). With a short k the sums of the
// vectors' lanes dominate: 256 x 10 x 128, 25.6 us against 5.3 in tiles.
template <class Kernel, class SA, class SB>
bool bf16_dot_products_fit(matrix_ref<const SA> a, matrix_ref<const SB> b, index_t n, index_t k) {
  const index_t m = a.rows;
  const index_t area = ceil_div(m, Kernel::mr) * Kernel::mr * ceil_div(n, Kernel::nr) * Kernel::nr;
  return a.cs == 1 && b.rs == 1 && k >= 1024 && 2 * m * n <= area;
}

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
#if defined(MELD_DETAIL_AMX)
    if (amx_bf16_usable()) {
      if (bf16_dot_products_fit<bf16_amx_kernel>(a, b, n, k))
        return gemm_dot<bf16_operand_read>(alpha, a, b, beta, c, threads);
      return gemm_blocked<bf16_amx_kernel>(alpha, a, b, beta, c, bf16_amx_kernel::blocking(),
                                           threads);
    }
#endif
    if (bf16_dot_products_fit<bf16_dot_kernel>(a, b, n, k))
      return gemm_dot<bf16_operand_read>(alpha, a, b, beta, c, threads);
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

#endif

}  // namespace meld::detail::cpu_eval

MELD_GCC12_WARNINGS_ON

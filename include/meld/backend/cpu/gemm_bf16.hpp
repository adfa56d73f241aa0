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

// gemm_dot's reads of bfloat16 operands (gemm_dot.hpp's read_as_stored): 32 elements along k at a
// time as bfloat16 pairs, float memory rounded (to nearest, ties to even, as the packings round
// it), bfloat16 memory as it is, multiplied by vdpbf16ps (twice the multiply-adds of a float FMA,
// each lane adding a pair's two products, as the kernels do); the elements past the last 32 as
// floats. Products of two bfloat16 values are exact in float, so the dot products add the same
// terms as the kernels. (Widening to float for FMAs instead ran LeNet's 20 x 9 x 29,068 weight
// gradient at 1.1 x float's time.)
struct bf16_operand_read {
  using vector = __m512bh;
  static constexpr index_t step = 32;
  static vector load(const float* p) {
    return _mm512_cvtne2ps_pbh(_mm512_loadu_ps(p + 16), _mm512_loadu_ps(p));
  }
  static vector load(const bfloat16* p) { return (__m512bh)_mm512_loadu_si512(p); }
  static void madd(vector a, vector b, xsimd::batch<float, simd_arch>& acc) {
    acc = _mm512_dpbf16_ps(acc, a, b);
  }
  static float value(float x) { return float(bfloat16(x)); }
  static float value(bfloat16 x) { return float(x); }
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

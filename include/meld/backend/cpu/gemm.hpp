// Matrix products on the CPU: C = alpha A B + beta C for strided operands, float and double
// through the blocked, packed GEMM (gemm_blocked.hpp) unless their shape calls for another loop.
//
// Integer types use the reference loop below, tiny products plain dot products; a row vector times
// a matrix (or a matrix times a column vector) streams the matrix unpacked, and a product with
// few columns and a long k (a weight gradient) is computed as blocks of dot products. With
// MELD_ENABLE_BLAS defined (the CMake option of that name), float and double go to the system BLAS
// when their strides allow it (gemm_blas.hpp).
#pragma once

#include <algorithm>
#include <type_traits>

#include "../../core/config.hpp"
#include "../../core/gcc12_warnings.hpp"
#include "../../runtime/thread_pool.hpp"
#include "gemm_blocked.hpp"
#include "gemm_dot.hpp"
#include "gemm_kernel.hpp"

MELD_GCC12_WARNINGS_OFF

namespace meld::detail::cpu_eval {

// The reference: a cache-blocked i-k-j loop whose inner loop runs along contiguous rows of B and
// C (vectorized by the compiler), with rows of C split over the thread pool. Any strides, any type.
template <class T>
void gemm_reference(T alpha, matrix_ref<const T> a, matrix_ref<const T> b, T beta,
                    matrix_ref<T> c) {
  const index_t m = c.rows, n = c.cols, k = a.cols;
  constexpr index_t kc = 256;  // a block of k: rows of B that stay in cache
  auto rows = [&](index_t i0, index_t i1) {
    for (index_t i = i0; i < i1; ++i) {
      for (index_t j = 0; j < n; ++j) c(i, j) = beta == T(0) ? T(0) : beta * c(i, j);
      for (index_t p0 = 0; p0 < k; p0 += kc) {
        const index_t p1 = std::min(k, p0 + kc);
        for (index_t p = p0; p < p1; ++p) {
          const T s = alpha * a(i, p);
          if (b.cs == 1 && c.cs == 1) {
            const T* brow = b.data + p * b.rs;
            T* crow = c.data + i * c.rs;
            for (index_t j = 0; j < n; ++j) crow[j] += s * brow[j];
          } else {
            for (index_t j = 0; j < n; ++j) c(i, j) += s * b(p, j);
          }
        }
      }
    }
  };
  const index_t work = m * n * std::max<index_t>(k, 1);
  const int threads = thread_pool::global().size();
  const index_t tasks = (threads == 1 || work < (index_t(1) << 18) || thread_pool::in_task())
                            ? 1
                            : std::min<index_t>(m, index_t(threads) * 4);
  if (tasks == 1) return rows(0, m);
  thread_pool::global().parallel_for(tasks,
                                     [&](index_t t) { rows(m * t / tasks, m * (t + 1) / tasks); });
}

template <class T>
void gemm_tiny(T alpha, matrix_ref<const T> a, matrix_ref<const T> b, T beta, matrix_ref<T> c) {
  for (index_t i = 0; i < c.rows; ++i)
    for (index_t j = 0; j < c.cols; ++j) {
      T s = T(0);
      for (index_t p = 0; p < a.cols; ++p) s += a(i, p) * b(p, j);
      c(i, j) = beta == T(0) ? alpha * s : alpha * s + beta * c(i, j);
    }
}

// ---- a row vector times a matrix ----------------------------------------------------------------

// c (1 x n) = alpha a (1 x k) b (k x n) + beta c when b has a unit stride: bound by reading b once,
// so it is streamed in place, not packed (a 1-row tile would waste most of the micro-kernel).
//   rows of b contiguous:    c += x_p b[p, :], four rows at a time, over fixed chunks of columns
//   columns of b contiguous: c_j = x . b[:, j], with four vector accumulators
// x = alpha a, copied contiguous. Chunks are fixed, so each c_j sees the same operations in the
// same order whatever the thread count.
template <class T>
void gemm_row_vector(T alpha, matrix_ref<const T> a, matrix_ref<const T> b, T beta, matrix_ref<T> c,
                     int threads) {
  using V = xsimd::batch<T, simd_arch>;
  constexpr index_t W = static_cast<index_t>(V::size);
  const index_t k = a.cols, n = c.cols;
  T* x = gemm_workspace::local().get<T>(k);
  for (index_t p = 0; p < k; ++p) x[p] = alpha * a(0, p);
  auto store = [&](index_t j, T value) {
    T& to = c(0, j);
    to = beta == T(0) ? value : beta * to + value;
  };

  constexpr index_t chunk = 512;  // columns per task: a chunk of accumulators stays in L1
  const index_t chunks = ceil_div(n, chunk);
  auto columns = [&](index_t q) {
    const index_t j0 = q * chunk, width = std::min(chunk, n - j0), vec_end = width / W * W;
    if (b.cs == 1) {
      alignas(64) T acc[chunk];
      std::fill_n(acc, width, T(0));
      index_t p = 0;
      for (; p + 4 <= k; p += 4) {
        const T* r0 = b.data + p * b.rs + j0;
        const T* r1 = r0 + b.rs;
        const T* r2 = r1 + b.rs;
        const T* r3 = r2 + b.rs;
        const V x0(x[p]), x1(x[p + 1]), x2(x[p + 2]), x3(x[p + 3]);
        for (index_t j = 0; j < vec_end; j += W) {
          V s = V::load_aligned(acc + j);
          s = xsimd::fma(x0, V::load_unaligned(r0 + j), s);
          s = xsimd::fma(x1, V::load_unaligned(r1 + j), s);
          s = xsimd::fma(x2, V::load_unaligned(r2 + j), s);
          s = xsimd::fma(x3, V::load_unaligned(r3 + j), s);
          s.store_aligned(acc + j);
        }
        for (index_t j = vec_end; j < width; ++j)
          acc[j] = acc[j] + x[p] * r0[j] + x[p + 1] * r1[j] + x[p + 2] * r2[j] + x[p + 3] * r3[j];
      }
      for (; p < k; ++p) {
        const T* r0 = b.data + p * b.rs + j0;
        for (index_t j = 0; j < width; ++j) acc[j] += x[p] * r0[j];
      }
      for (index_t j = 0; j < width; ++j) store(j0 + j, acc[j]);
    } else {  // b.rs == 1
      const index_t k_end = k / (4 * W) * (4 * W);
      for (index_t j = j0; j < j0 + width; ++j) {
        const T* col = b.data + j * b.cs;
        V s0(T(0)), s1(T(0)), s2(T(0)), s3(T(0));
        for (index_t p = 0; p < k_end; p += 4 * W) {
          s0 = xsimd::fma(V::load_unaligned(x + p), V::load_unaligned(col + p), s0);
          s1 = xsimd::fma(V::load_unaligned(x + p + W), V::load_unaligned(col + p + W), s1);
          s2 = xsimd::fma(V::load_unaligned(x + p + 2 * W), V::load_unaligned(col + p + 2 * W), s2);
          s3 = xsimd::fma(V::load_unaligned(x + p + 3 * W), V::load_unaligned(col + p + 3 * W), s3);
        }
        alignas(64) T lanes[W];
        ((s0 + s1) + (s2 + s3)).store_aligned(lanes);
        T sum = T(0);
        for (index_t l = 0; l < W; ++l) sum += lanes[l];
        for (index_t p = k_end; p < k; ++p) sum += x[p] * col[p];
        store(j, sum);
      }
    }
  };
  const index_t tasks = threads > 1 ? std::min<index_t>(chunks, threads) : 1;
  if (tasks == 1) {
    for (index_t q = 0; q < chunks; ++q) columns(q);
  } else {
    thread_pool::global().parallel_for(tasks, [&](index_t t) {
      for (index_t q = chunks * t / tasks; q < chunks * (t + 1) / tasks; ++q) columns(q);
    });
  }
}

}  // namespace meld::detail::cpu_eval

#if defined(MELD_ENABLE_BLAS) && MELD_ENABLE_BLAS
#include "gemm_blas.hpp"
#endif

namespace meld::detail::cpu_eval {

// Whether the packed kernel should compute c = a b (m x n, over k) as c^T = b^T a^T: a c narrower
// than a tile (n < NR) wastes most of each tile's columns, and the transpose puts n into the tiles'
// MR rows instead. Taken when that at least halves the tile area computed, over one k block at
// most: with a longer k, gemm_dot's dot products (where they fit) do better. Measured on one core
// of the Xeon AMX VM (m = 256): n = 10 and 16, k = 128: 80 and 110 GFLOP/s transposed against 32
// and 35 as dot products; k = 512: 81 and 111 against 68 and 73; k = 4096: 56 and 80 against 65
// and 83. n = 32, k = 128 (not a dot product): 157 against 106 in 64-wide tiles.
template <class T>
bool gemm_transposed_fits(index_t m, index_t n, index_t k) {
  using tile = gemm_tile<T>;
  const auto area = [](index_t rows, index_t cols) {
    return ceil_div(rows, tile::mr) * tile::mr * ceil_div(cols, tile::nr) * tile::nr;
  };
  return n < tile::nr && k <= default_gemm_blocking<T>().kc && 2 * area(n, m) <= area(m, n);
}

// c = alpha a b + beta c for float or double with m, n, k > 0 and alpha != 0, c storing rows
// with unit stride where it can.
template <class T>
void gemm_oriented(T alpha, matrix_ref<const T> a, matrix_ref<const T> b, T beta, matrix_ref<T> c) {
#if defined(MELD_ENABLE_BLAS) && MELD_ENABLE_BLAS
  if (gemm_blas(alpha, a, b, beta, c)) return;
#endif
  const index_t m = c.rows, n = c.cols, k = a.cols;
  const index_t work = m * n * k;
  if (work < gemm_small_work) return gemm_tiny(alpha, a, b, beta, c);
  const int threads =
      work < gemm_parallel_work || thread_pool::in_task() ? 1 : thread_pool::global().size();
  if (m == 1 && (b.cs == 1 || b.rs == 1)) return gemm_row_vector(alpha, a, b, beta, c, threads);
  if (gemm_transposed_fits<T>(m, n, k))
    return gemm_blocked<packed_kernel<T>>(alpha, b.transposed(), a.transposed(), beta,
                                          c.transposed(), default_gemm_blocking<T>(), threads);
  if (gemm_dot_fits<T>(a, b, n, k))
    return gemm_dot<read_as_stored<T>>(alpha, a, b, beta, c, threads);
  gemm_blocked<packed_kernel<T>>(alpha, a, b, beta, c, default_gemm_blocking<T>(), threads);
}

// The entry point the executor calls: c = alpha a b + beta c. c does not overlap a or b. With
// alpha == 0 (or k == 0), a and b are not read; with beta == 0, c is not read (BLAS semantics).
template <class T>
void gemm(T alpha, matrix_ref<const T> a, matrix_ref<const T> b, T beta, matrix_ref<T> c) {
  const index_t m = c.rows, n = c.cols, k = a.cols;
  if (m == 0 || n == 0) return;
  if (k == 0 || alpha == T(0)) return gemm_scale(beta, c);
  if constexpr (!std::is_same_v<T, float> && !std::is_same_v<T, double>) {
    gemm_reference(alpha, a, b, beta, c);
  } else {
    // The kernel stores rows of C with vector instructions: when C is column-major, compute the
    // transposed product C^T = B^T A^T instead (nothing moves). A column vector C becomes a row.
    if ((c.cs != 1 && c.rs == 1) || (n == 1 && m > 1))
      gemm_oriented(alpha, b.transposed(), a.transposed(), beta, c.transposed());
    else
      gemm_oriented(alpha, a, b, beta, c);
  }
}

}  // namespace meld::detail::cpu_eval

MELD_GCC12_WARNINGS_ON

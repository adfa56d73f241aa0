// Dot products for a product whose C is narrow and whose k is long (a weight gradient with few
// columns): each element of C is a dot product of a row of A and a column of B, read where they
// are, with no packing (gemm.hpp and gemm_bf16.hpp choose it).
#pragma once

#include <algorithm>

#include "../../core/config.hpp"
#include "../../core/gcc12_warnings.hpp"
#include "../../runtime/thread_pool.hpp"
#include "cache_sizes.hpp"
#include "gemm_blocked.hpp"
#include "gemm_kernel.hpp"

MELD_GCC12_WARNINGS_OFF

namespace meld::detail::cpu_eval {

// The tile of gemm_dot: R rows of a times C columns of b, R C vector accumulators (plus R + 1
// vectors of operands) within the register file.
template <class T, class Arch = detail::simd_arch>
struct gemm_dot_tile {
  static constexpr int r = 4;
  static constexpr int c = gemm_tile<T, Arch>::wide_register_file ? 3 : 2;
};

// Whether gemm_dot should compute c = a b (after gemm's orientation): a's rows and b's columns
// contiguous along k, k long enough to fill vectors, and c narrow: n <= NR / 2, where the packed
// kernel's NR-wide tiles would compute at least as many columns as it keeps, or n < NR with at
// most MR rows, where each packed panel of B would serve a single tile. Measured on one core of
// the Xeon AMX VM (NR = 64, MR = 6), dot products against the packed kernel: m x n x k = 6 x 25 x
// 10192 (the weight gradient of a 6-channel 5 x 5 convolution) 85 against 366 us, 6 x 63 x 5000 125
// against 265, 64 x 32 x 5000 468 against 541, 256 x 20 x 1500 373 against 444; but 64 x 48 x 5000
// 786 against 641 and 16 x 150 x 1700 230 against 213.
template <class T, class SA, class SB>
bool gemm_dot_fits(matrix_ref<const SA> a, matrix_ref<const SB> b, index_t n, index_t k) {
  using V = xsimd::batch<T, simd_arch>;
  using tile = gemm_tile<T>;
  const bool narrow = n <= tile::nr / 2 || (n < tile::nr && a.rows <= tile::mr);
  return a.cs == 1 && b.rs == 1 && narrow && k >= 4 * static_cast<index_t>(V::size);
}

// How gemm_dot reads its operands: `step` elements along k per load of each operand; as they are
// stored, a vector at a time, multiplied with fused multiply-adds (gemm_bf16.hpp has one that reads
// them as bfloat16 pairs, with a `madd` of its own: vdpbf16ps).
template <class T>
struct read_as_stored {
  using vector = xsimd::batch<T, simd_arch>;
  static constexpr index_t step = static_cast<index_t>(vector::size);
  static vector load(const T* p) { return vector::load_unaligned(p); }
  static T value(T x) { return x; }
};

// c (m x n) = alpha a b + beta c for a narrow c and a long k, with a's rows and b's columns
// contiguous along k (gemm_dot_fits): e.g. the weight gradient of a convolution with few input
// channels (conv 1 -> 20, 3 x 3: dW {20 x 9} = g {20 x 676 batch} col^T). There the packed kernel
// computes 64-wide tiles of which 9 columns are kept, after packing col^T into panels that are
// mostly zeros. Here each c_ij is a dot product of two contiguous rows, computed R x C at a time
// (R + C vector loads for R C fused multiply-adds, in vector accumulators), over blocks of k that
// stay in L2 while every tile passes over them; each tile's accumulators are kept between the
// blocks. Threads split the tiles, never k: the same bits for any thread count.
template <class Read, class T, class SA, class SB>
void gemm_dot(T alpha, matrix_ref<const SA> a, matrix_ref<const SB> b, T beta, matrix_ref<T> c,
              int threads) {
  using V = xsimd::batch<T, simd_arch>;
  constexpr index_t W = static_cast<index_t>(V::size);
  constexpr int R = gemm_dot_tile<T>::r, C = gemm_dot_tile<T>::c;
  const index_t m = c.rows, n = c.cols, k = a.cols;
  constexpr index_t S = Read::step;
  const index_t k_vec = k / S * S;  // the vectorized part; the rest is added per element
  const index_t row_tiles = ceil_div(m, R), col_tiles = ceil_div(n, C),
                tiles = row_tiles * col_tiles;
  // k in blocks whose rows of a and b (m + n of them) take half of L2.
  const auto l2 = static_cast<index_t>(host_cache_sizes().l2);
  const index_t kb =
      std::max<index_t>(S * 64, l2 / 2 / (static_cast<index_t>(sizeof(T)) * (m + n)) / S * S);
  // The accumulators of every tile between blocks (R C vectors each), then R C lane sums.
  T* saved = gemm_workspace::local().get<T>(tiles * R * C * W);

  auto run_tiles = [&](index_t t0, index_t t1) {
    for (index_t p0 = 0; p0 < k_vec; p0 += kb) {
      const index_t p1 = std::min(k_vec, p0 + kb);
      for (index_t t = t0; t < t1; ++t) {
        const index_t i0 = (t / col_tiles) * R, j0 = (t % col_tiles) * C;
        // Rows and columns past the edge repeat the last one (computed, never stored).
        const SA* ar[R];
        const SB* bc[C];
        unrolled<R>([&](auto r) { ar[r] = a.data + std::min<index_t>(i0 + r, m - 1) * a.rs; });
        unrolled<C>([&](auto q) { bc[q] = b.data + std::min<index_t>(j0 + q, n - 1) * b.cs; });
        T* keep = saved + t * (R * C * W);
        V acc[R][C];
        unrolled<R>([&](auto r) {
          unrolled<C>([&](auto q) {
            acc[r][q] = p0 == 0 ? V(T(0)) : V::load_aligned(keep + (r * C + q) * W);
          });
        });
        for (index_t p = p0; p < p1; p += S) {
          typename Read::vector bv[C];
          unrolled<C>([&](auto q) { bv[q] = Read::load(bc[q] + p); });
          unrolled<R>([&](auto r) {
            const typename Read::vector av = Read::load(ar[r] + p);
            unrolled<C>([&](auto q) {
              // (The FMA written out: through a function like madd, g++ 12 reloaded the operands
              // from memory for every FMA, and float's dot products took 1.4 x as long.)
              if constexpr (std::is_same_v<Read, read_as_stored<T>>)
                acc[r][q] = xsimd::fma(av, bv[q], acc[r][q]);
              else
                Read::madd(av, bv[q], acc[r][q]);
            });
          });
        }
        unrolled<R>([&](auto r) {
          unrolled<C>([&](auto q) { acc[r][q].store_aligned(keep + (r * C + q) * W); });
        });
      }
    }
    for (index_t t = t0; t < t1; ++t) {
      const index_t i0 = (t / col_tiles) * R, j0 = (t % col_tiles) * C;
      const T* keep = saved + t * (R * C * W);
      for (index_t r = 0; r < R && i0 + r < m; ++r)
        for (index_t q = 0; q < C && j0 + q < n; ++q) {
          T s = T(0);
          if (k_vec > 0)
            for (index_t l = 0; l < W; ++l) s += keep[(r * C + q) * W + l];
          const SA* ai = a.data + (i0 + r) * a.rs;
          const SB* bj = b.data + (j0 + q) * b.cs;
          for (index_t p = k_vec; p < k; ++p) s += Read::value(ai[p]) * Read::value(bj[p]);
          T& to = c(i0 + r, j0 + q);
          to = beta == T(0) ? alpha * s : alpha * s + beta * to;
        }
    }
  };
  const index_t tasks = threads > 1 ? std::min<index_t>(tiles, threads) : 1;
  if (tasks == 1) return run_tiles(0, tiles);
  thread_pool::global().parallel_for(
      tasks, [&](index_t t) { run_tiles(tiles * t / tasks, tiles * (t + 1) / tasks); });
}

}  // namespace meld::detail::cpu_eval

MELD_GCC12_WARNINGS_ON

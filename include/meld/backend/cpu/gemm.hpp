// Matrix products on the CPU: C = alpha A B + beta C for strided operands.
//
// This is the reference implementation: a cache-blocked i-k-j loop whose inner loop runs along
// contiguous rows of B and C (vectorized by the compiler), with rows of C split over the thread
// pool. It accepts any strides (transposed views included, without copying).
#pragma once

#include <algorithm>
#include <type_traits>

#include "../../core/config.hpp"
#include "thread_pool.hpp"

namespace meld::detail::cpu_eval {

// A strided matrix: element (i, j) at data[i * rs + j * cs].
template <class T>
struct matrix_ref {
  T* data;
  index_t rows, cols;
  index_t rs, cs;
  MELD_INLINE T& operator()(index_t i, index_t j) const { return data[i * rs + j * cs]; }
};

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

// The entry point the executor calls; the optimized kernel replaces this body.
template <class T>
void gemm(T alpha, matrix_ref<const T> a, matrix_ref<const T> b, T beta, matrix_ref<T> c) {
  gemm_reference(alpha, a, b, beta, c);
}

}  // namespace meld::detail::cpu_eval

// Matrix products through a system BLAS (CBLAS), for builds with MELD_ENABLE_BLAS (the CMake option
// of that name links BLAS::BLAS into meld::meld and defines the macro).
//
// A strided operand is a BLAS matrix when one of its strides is 1: unit column stride reads as a
// row-major matrix (CblasNoTrans, leading dimension = row stride), unit row stride as the
// transpose of one (CblasTrans, leading dimension = column stride). C must be row-major (gemm()
// has already turned a column-major C into the transposed product). Anything else (general
// strides, zero or negative strides, sizes beyond int) is left to meld's own kernel.
//
// The BLAS uses its own threads: meld::set_num_threads does not limit them (with OpenBLAS, set
// OPENBLAS_NUM_THREADS or call openblas_set_num_threads).
#pragma once

#include <algorithm>
#include <climits>
#include <type_traits>

#include <cblas.h>

#include "../../core/config.hpp"

namespace meld::detail::cpu_eval {

struct blas_matrix {
  CBLAS_TRANSPOSE trans;
  int ld;
};

// How an operand of rows x cols elements at strides (rs, cs) reads as a BLAS matrix in row-major
// order; false when it does not. A stride along an extent of 1 is never used, so it is free.
inline bool as_blas_matrix(index_t rows, index_t cols, index_t rs, index_t cs, blas_matrix& out) {
  auto fits = [](index_t ld, index_t lo) {
    return ld >= std::max<index_t>(lo, 1) && ld <= INT_MAX;
  };
  if (cs == 1 || cols == 1) {  // rows contiguous
    const index_t ld = rows == 1 ? std::max<index_t>(cols, 1) : rs;
    if (fits(ld, cols)) {
      out = {CblasNoTrans, static_cast<int>(ld)};
      return true;
    }
  }
  if (rs == 1 || rows == 1) {  // columns contiguous
    const index_t ld = cols == 1 ? std::max<index_t>(rows, 1) : cs;
    if (fits(ld, rows)) {
      out = {CblasTrans, static_cast<int>(ld)};
      return true;
    }
  }
  return false;
}

// c = alpha a b + beta c through cblas_sgemm / cblas_dgemm; false (nothing done) when the strides
// or sizes do not fit BLAS.
template <class T>
bool gemm_blas(T alpha, matrix_ref<const T> a, matrix_ref<const T> b, T beta, matrix_ref<T> c) {
  const index_t m = c.rows, n = c.cols, k = a.cols;
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX) return false;
  blas_matrix la, lb, lc;
  if (!as_blas_matrix(m, k, a.rs, a.cs, la) || !as_blas_matrix(k, n, b.rs, b.cs, lb) ||
      !as_blas_matrix(m, n, c.rs, c.cs, lc) || lc.trans != CblasNoTrans)
    return false;
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, la.trans, lb.trans, mi, ni, ki, alpha, a.data, la.ld, b.data, lb.ld,
                beta, c.data, lc.ld);
  else
    cblas_dgemm(CblasRowMajor, la.trans, lb.trans, mi, ni, ki, alpha, a.data, la.ld, b.data, lb.ld,
                beta, c.data, lc.ld);
  return true;
}

}  // namespace meld::detail::cpu_eval

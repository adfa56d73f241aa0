// Matrix products on CUDA through cuBLAS: strided operands mapped onto cuBLAS's column-major
// conventions without copies where the layout allows (blas.hpp), other operands evaluated first.
//
// A part of executor.hpp, which includes it once executor<cuda<P>> is declared: include that.
#pragma once

#include "platform.hpp"

#include <algorithm>

#include "blas.hpp"

namespace meld {

namespace detail::cuda_eval {

// An operand of a product as a strided device matrix: tensors and views in place, other
// expressions evaluated first.
template <class T, class B, class E>
tensor_view<const T, B> as_device_operand(const E& e) {
  if constexpr (strided_leaf<E> && std::is_same_v<value_t<E>, T>) {
    return tensor_view<const T, B>(e.storage_ptr(), const_cast<T*>(e.raw_data()),
                                   layout{e.shape(), e.strides(), 0});
  } else {
    tensor<T, B> t(e.shape(), uninitialized);
    executor<B>::assign(t, e);
    return std::move(t).release();
  }
}

}  // namespace detail::cuda_eval

template <class Policy>
template <class T, class A, class B, class C>
void executor<cuda<Policy>>::gemm(T alpha, const A& a_expr, const B& b_expr, T beta, const C& c) {
  using namespace detail::cuda_eval;
  using Back = cuda<Policy>;
  if (c.size() == 0) return;
  detail::trace_scope traced("gemm", "cuda", {"elements", c.size()});
  auto& out_access = c.storage_ptr()->access();
  const int device = out_access.device();
  cuda_device_guard guard(device);
  cudaStream_t s = out_access.home()->handle;
  detail::check_devices("gemm", c, a_expr, b_expr);
  auto a = as_device_operand<T, Back>(a_expr);
  auto b = as_device_operand<T, Back>(b_expr);

  const shape_t& cs = c.shape();
  const int rc = cs.size();
  const index_t m = cs[rc - 2], n = cs[rc - 1], k = a.shape().back();
  const index_t batches = rc == 3 ? cs[0] : 1;
  auto mat = [](const auto& t, index_t& rs, index_t& cst, index_t& batch_stride) {
    const int r = t.rank();
    rs = t.strides()[r - 2];
    cst = t.strides()[r - 1];
    batch_stride = r == 3 ? t.strides()[0] : 0;
  };
  index_t ars, acs, abs_, brs, bcs, bbs, crs, ccs, cbs;
  mat(a, ars, acs, abs_);
  mat(b, brs, bcs, bbs);
  mat(c, crs, ccs, cbs);
  // C must be row-major (unit column stride) for the C^T = B^T A^T formulation; the operands
  // need a unit stride in one direction. Otherwise: copies (rare).
  const auto opa = detail::as_column_major_transposed(m, k, ars, acs);
  const auto opb = detail::as_column_major_transposed(k, n, brs, bcs);
  const bool c_ok = (ccs == 1 || n == 1) && crs >= n;
  // An operand that overlaps c goes through the copies too (cuBLAS may not alias them).
  const bool aliased = detail::reads_destination(c, a) || detail::reads_destination(c, b);
  // Element types cuBLAS has no product of (integers) take meld's kernel, which reads any strides.
  constexpr bool blas = detail::has_cublas_type<T>;
  if ((blas && (!opa.ok || !opb.ok || !c_ok)) || aliased) {
    tensor<T, Back> ca(a.shape(), uninitialized), cb(b.shape(), uninitialized),
        cc(cs, uninitialized);
    executor::assign(ca, a);
    executor::assign(cb, b);
    if (beta != T(0))
      executor::assign(cc, tensor_view<const T, Back>(c.storage_ptr(), const_cast<T*>(c.raw_data()),
                                                      layout{cs, c.strides(), 0}));
    gemm(alpha, ca, cb, beta, cc);
    executor::assign(c, cc);
    return;
  }
  // (An empty operand, k = 0, has no storage: C = beta C.)
  detail::cuda_access* a_access = a.storage_ptr() ? &a.storage_ptr()->access() : nullptr;
  detail::cuda_access* b_access = b.storage_ptr() ? &b.storage_ptr()->access() : nullptr;
  if (a_access) a_access->before(s, false);
  if (b_access) b_access->before(s, false);
  out_access.before(s, true);

  if constexpr (blas) {
    cublasHandle_t h = detail::cublas_handle(device, s);
    const int ldc = static_cast<int>(std::max<index_t>(crs, std::max<index_t>(n, 1)));
    // C^T (n x m) = op(B^T) (n x k) op(A^T) (k x m), column-major.
    const cudaDataType_t type = detail::cuda_type<T>();
    cublasComputeType_t compute =
        std::is_same_v<T, double> ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
    if (std::is_same_v<T, float> && detail::allow_tf32()) compute = CUBLAS_COMPUTE_32F_FAST_TF32;
    using Scale = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const Scale al = static_cast<Scale>(alpha), be = static_cast<Scale>(beta);
    MELD_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        h, opb.op, opa.op, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &al,
        b.raw_data(), type, opb.ld, bbs, a.raw_data(), type, opa.ld, abs_, &be,
        const_cast<T*>(c.raw_data()), type, ldc, rc == 3 ? cbs : 0, static_cast<int>(batches),
        compute, CUBLAS_GEMM_DEFAULT));
  } else {
    const gemm_operand<T> ga{a.raw_data(), ars, acs, abs_}, gb{b.raw_data(), brs, bcs, bbs};
    launch("meld::cuda gemm kernel", gemm_kernel<T>, batches * m * n, device, s, alpha, ga, gb,
           beta, const_cast<T*>(c.raw_data()), gemm_layout{crs, ccs, rc == 3 ? cbs : 0}, batches, m,
           n, k);
  }
  if (a_access) a_access->after(s, false);
  if (b_access) b_access->after(s, false);
  out_access.after(s, true);
  finish(s);
}

}  // namespace meld

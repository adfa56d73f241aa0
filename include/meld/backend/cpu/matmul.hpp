// Matrix products on the CPU: the bridge from expressions (strided views, transposes, batches) to
// the packed kernel in gemm.hpp; a product inside a larger expression is computed once, into a
// temporary.
#pragma once

#include <algorithm>
#include <type_traits>

#include "../../core/gcc12_warnings.hpp"
#include "../../expr/matmul.hpp"
#include "../../runtime/thread_pool.hpp"
#include "../../tensor/tensor.hpp"
#include "assign.hpp"
#include "gemm.hpp"
#include "gemm_bf16.hpp"

MELD_GCC12_WARNINGS_OFF

namespace meld::detail::cpu_eval {

// An operand of a product as strided memory: leaves are used in place, other expressions are
// evaluated into a temporary first.
template <class T>
struct strided_operand {
  const T* data;
  shape_t shape;
  strides_t strides;
  tensor<T, cpu<>> temporary;
};

template <class T, class E>
strided_operand<T> as_strided(const E& e) {
  if constexpr (strided_leaf<E> && std::is_same_v<value_t<E>, T>) {
    return {e.raw_data(), e.shape(), e.strides(), tensor<T, cpu<>>()};
  } else {
    tensor<T, cpu<>> t(e.shape(), uninitialized);
    assign(t, e);
    const T* data = t.raw_data();
    return {data, t.shape(), t.strides(), std::move(t)};
  }
}

// c = alpha a b + beta c for rank-2 or rank-3 (batched) strided operands; c does not overlap a
// or b (gemm_into copies an operand that does). Bf16: the operands are read as bfloat16 by
// gemm_bf16.hpp's kernel (bfloat16 memory, or float rounded as it is packed). One instantiation
// per element types, whatever the operands' expressions.
template <class T, bool Bf16 = false, class SA, class SB>
MELD_NOINLINE void gemm_strided(T alpha, const strided_operand<SA>& a, const strided_operand<SB>& b,
                                T beta, T* c_data, const shape_t& cs, const strides_t& c_strides) {
  const int rc = cs.size();
  const index_t batches = rc == 3 ? cs[0] : 1;
  auto matrix = []<class S>(const strided_operand<S>& x, index_t batch) {
    const int r = x.shape.size();
    const index_t offset = r == 3 ? batch * x.strides[0] : 0;
    return matrix_ref<const S>{x.data + offset, x.shape[r - 2], x.shape[r - 1], x.strides[r - 2],
                               x.strides[r - 1]};
  };
  auto one = [&](index_t batch) {
    const index_t c_off = rc == 3 ? batch * c_strides[0] : 0;
    matrix_ref<T> c{c_data + c_off, cs[rc - 2], cs[rc - 1], c_strides[rc - 2], c_strides[rc - 1]};
    if constexpr (Bf16)
      gemm_bf16(alpha, matrix(a, batch), matrix(b, batch), beta, c);
    else
      gemm(alpha, matrix(a, batch), matrix(b, batch), beta, c);
  };
  // A batch of products too small to use the threads one by one runs one product per task (each
  // on one thread; the results do not depend on the thread count either way).
  const index_t k = a.shape.back(), work = cs[rc - 2] * cs[rc - 1] * k;
  const int threads = thread_pool::global().size();
  if (batches > 1 && threads > 1 && work < gemm_parallel_work * threads &&
      work * batches >= gemm_parallel_work && !thread_pool::in_task()) {
    const index_t tasks = std::min<index_t>(batches, index_t(threads) * 4);
    thread_pool::global().parallel_for(tasks, [&](index_t t) {
      for (index_t batch = batches * t / tasks; batch < batches * (t + 1) / tasks; ++batch)
        one(batch);
    });
    return;
  }
  for (index_t batch = 0; batch < batches; ++batch) one(batch);
}

// An operand of a product of T: strided memory of T; for the bfloat16 kernel (Bf16), bfloat16
// memory, or the float tensor x of cast<bfloat16>(x), which the kernel's packing rounds (no
// bfloat16 copy of it is made).
template <class E>
inline constexpr bool is_bfloat16_cast_of_float_leaf = false;
template <class L>
inline constexpr bool is_bfloat16_cast_of_float_leaf<map_expr<ops::cast_op<bfloat16>, L>> =
    (strided_leaf<L> && std::is_same_v<value_t<L>, float>);
template <class T, bool Bf16, class E>
auto product_operand(const E& e) {
  if constexpr (!Bf16)
    return as_strided<T>(e);
  else if constexpr (is_bfloat16_cast_of_float_leaf<E>)
    return as_strided<float>(e.template operand<0>());
  else
    return as_strided<bfloat16>(e);
}

// An operand that overlaps the output is copied first: a product reads each operand element many
// times, some after the output elements over it are written (README: aliasing is safe).
template <class T>
void detach(strided_operand<T>& x, const byte_span& out) {
  if (x.temporary.size() != 0 || x.shape.product() == 0 ||
      !overlaps(span_of(reinterpret_cast<const char*>(x.data), x.shape, x.strides, sizeof(T)), out))
    return;
  tensor<T, cpu<>> copy(x.shape, uninitialized);
  assign(copy, tensor_view<const T, cpu<>>(nullptr, x.data, layout{x.shape, x.strides, 0}));
  x.data = copy.raw_data();
  x.strides = copy.strides();
  x.temporary = std::move(copy);
}

// c = alpha a b + beta c for expressions a and b (evaluated first unless they are strided leaves,
// and copied first when they overlap c).
template <class T, class A, class B, class C>
void gemm_into(T alpha, const A& a_expr, const B& b_expr, T beta, const C& c_view) {
  if constexpr (!std::is_same_v<T, compute_t<T>>) {
    // bfloat16 and half: the operands widened to float (exactly), a float product (float
    // accumulation), rounded once as it is stored. A converting fallback: the CPU kernels
    // multiply floats.
    using F = compute_t<T>;
    tensor<F, cpu<>> c(c_view.shape(), uninitialized);
    if (static_cast<F>(beta) != F(0)) assign(c, c_view);
    gemm_into(static_cast<F>(alpha), a_expr, b_expr, static_cast<F>(beta), c);
    assign(c_view, c);
  } else {
    // bfloat16 operands of a float product go to the vdpbf16ps kernel where it exists
    // (gemm_bf16.hpp); elsewhere operands are read as T (widened, exactly, from bfloat16).
    constexpr bool bf16 = std::is_same_v<T, float> && has_bf16_dot &&
                          std::is_same_v<value_t<A>, bfloat16> &&
                          std::is_same_v<value_t<B>, bfloat16>;
    auto a = product_operand<T, bf16>(a_expr);
    auto b = product_operand<T, bf16>(b_expr);
    if (c_view.size() != 0) {
      const byte_span out = span_of(reinterpret_cast<const char*>(c_view.raw_data()),
                                    c_view.shape(), c_view.strides(), sizeof(T));
      detach(a, out);
      detach(b, out);
    }
    gemm_strided<T, bf16>(alpha, a, b, beta, const_cast<T*>(c_view.raw_data()), c_view.shape(),
                          c_view.strides());
  }
}

template <class A, class B>
tensor<typename matmul_expr<A, B>::value_type, cpu<>> materialize(const matmul_expr<A, B>& e) {
  using V = typename matmul_expr<A, B>::value_type;
  tensor<V, cpu<>> t(e.shape(), uninitialized);
  gemm_into(V(1), e.lhs(), e.rhs(), V(0), t);
  return t;
}

}  // namespace meld::detail::cpu_eval

MELD_GCC12_WARNINGS_ON

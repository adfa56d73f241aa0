// matmul of variables: a {m, k} x b {k, n}, or batched {batch, m, k} x {batch, k, n} where a
// rank-2 operand is shared by every batch (as meld::matmul). Gradients: da = g b^T, db = a^T g,
// summed over the batch for a shared operand; each a product of strided views (no transposed
// copies), accumulated straight into a leaf's gradient where the ranks agree.
#pragma once

#include <array>
#include <utility>

#include "../expr/matmul.hpp"
#include "reductions.hpp"

namespace meld::autograd {

/// \addtogroup autograd
/// @{

namespace detail {

struct matmul_function {
  static constexpr const char* name = "matmul";

  template <class T, class B>
  tensor<T, B> forward(function_context<T, B>& ctx, const tensor<T, B>& a, const tensor<T, B>& b) {
    ctx.save_for_backward(a);
    ctx.save_for_backward(b);
    return tensor<T, B>(meld::matmul(a, b));
  }

  template <class T, class B>
  std::array<tensor<T, B>, 2> backward(function_context<T, B>& ctx, const tensor<T, B>& g) {
    const auto& a = ctx.saved(0);
    const auto& b = ctx.saved(1);
    auto t = [](const auto& v) { return v.rank() == 3 ? v.permute({0, 2, 1}) : v.transpose(); };
    std::array<tensor<T, B>, 2> out;
    // A parameter's gradient takes a plain product in place (gemm with beta = 1).
    if (ctx.needs_input_grad(0)) {
      tensor<T, B>* in_place = g.rank() == a.rank() ? ctx.gradient_in_place(0) : nullptr;
      if (in_place) {
        gemm(T(1), g, t(b), T(1), *in_place);
      } else {
        tensor<T, B> da = meld::matmul(g, t(b));
        if (a.rank() == 2 && da.rank() == 3) da = tensor<T, B>(meld::sum(da, 0));
        out[0] = std::move(da);
      }
    }
    if (ctx.needs_input_grad(1)) {
      tensor<T, B>* in_place = g.rank() == b.rank() ? ctx.gradient_in_place(1) : nullptr;
      if (in_place) {
        gemm(T(1), t(a), g, T(1), *in_place);
      } else {
        tensor<T, B> db = meld::matmul(t(a), g);
        if (b.rank() == 2 && db.rank() == 3) db = tensor<T, B>(meld::sum(db, 0));
        out[1] = std::move(db);
      }
    }
    return out;
  }
};

}  // namespace detail

/// The matrix product of two variables (or expressions of them, or a variable and a tensor).
template <class A, class C>
requires expression<A> && expression<C> &&
    (differentiable<A> || differentiable<C>)auto matmul(A&& a, C&& c) {
  using T = value_t<A>;
  using B = common_backend_t<backend_t<A>, backend_t<C>>;
  auto wrap = [](auto&& x) {
    using X = decltype(x);
    if constexpr (differentiable<X>)
      return detail::as_variable(std::forward<X>(x));
    else
      return variable<T, B>(tensor<T, B>(std::forward<X>(x)));
  };
  return apply(detail::matmul_function{}, wrap(std::forward<A>(a)), wrap(std::forward<C>(c)));
}

/// @}

}  // namespace meld::autograd

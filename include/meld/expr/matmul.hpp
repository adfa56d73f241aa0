// Matrix products: matmul(a, b) as an expression, and gemm(alpha, a, b, beta, c) in place.
//
//   matmul(a, b)   a {m, k} x b {k, n} -> {m, n}; batched: {batch, m, k} x {batch, k, n}, where a
//                  rank-2 operand is shared by every batch. Operands may be strided views
//                  (transposes included: they are not copied). Assigned to a tensor, the product
//                  is computed straight into it; inside a larger expression it is computed once,
//                  into a temporary.
//   gemm(alpha, a, b, beta, c)   c = alpha * a b + beta * c, in place (c is a tensor or a view):
//                  what backward passes use to accumulate gradients (dW += x^T g).
#pragma once

#include <type_traits>
#include <utility>

#include "../core/broadcast.hpp"
#include "expression.hpp"

namespace meld {

/// \addtogroup expressions
/// @{

namespace detail {

// The shape of a b for matmul (throws shape_error naming both shapes).
inline shape_t matmul_shape(const shape_t& a, const shape_t& b, const char* what) {
  if (a.size() < 2 || a.size() > 3 || b.size() < 2 || b.size() > 3)
    raise<shape_error>(what, ": operands must have rank 2 or 3 (a ", a, ", b ", b, ")");
  const index_t m = a[a.size() - 2], k = a.back(), kb = b[b.size() - 2], n = b.back();
  if (k != kb)
    raise<shape_error>(what, ": shapes ", a, " and ", b, " do not match: a has ", k,
                       " columns, b has ", kb, " rows");
  if (a.size() == 3 && b.size() == 3 && a[0] != b[0])
    raise<shape_error>(what, ": batch sizes differ: ", a, " and ", b);
  const shape_t out = a.size() == 3   ? shape_t{a[0], m, n}
                      : b.size() == 3 ? shape_t{b[0], m, n}
                                      : shape_t{m, n};
  checked_size(out, what);  // broadcast views can make m x n overflow
  return out;
}

}  // namespace detail

template <class A, class B>
class matmul_expr : public expression_tag {
 public:
  using value_type = std::common_type_t<value_t<A>, value_t<B>>;
  using backend_type = common_backend_t<backend_t<A>, backend_t<B>>;
  using lhs_type = A;
  using rhs_type = B;
  static constexpr bool composite = true;  // see expr/walk.hpp
  static_assert(std::is_same_v<value_t<A>, value_t<B>>,
                "meld::matmul: both operands must have the same element type (use meld::cast)");

  matmul_expr(A a, B b)
      : a_(std::move(a)),
        b_(std::move(b)),
        shape_(detail::matmul_shape(a_.shape(), b_.shape(), "matmul")) {}

  const shape_t& shape() const { return shape_; }
  const shape_t* uniform_shape() const { return &shape_; }
  const A& lhs() const { return a_; }
  const B& rhs() const { return b_; }

  // The product of f(lhs) and f(rhs), computed in that order.
  template <class F>
  auto transform(F&& f) const {
    auto a = f(a_);
    auto b = f(b_);
    return matmul_expr<decltype(a), decltype(b)>(std::move(a), std::move(b));
  }
  template <class F>
  void for_each_operand(F&& f) const {
    f(a_);
    f(b_);
  }

 private:
  A a_;
  B b_;
  shape_t shape_;
};

/// The matrix product of a {m, k} and b {k, n} -> {m, n}; with more axes, a batch of products over
/// the leading axes (broadcast as numpy's matmul). An expression: evaluated when assigned. Throws
/// shape_error when the inner extents differ.
template <class A, class B>
requires expression<A> && expression<B>
auto matmul(A&& a, B&& b) {
  auto ca = make_closure(std::forward<A>(a));
  auto cb = make_closure(std::forward<B>(b));
  return matmul_expr<decltype(ca), decltype(cb)>(std::move(ca), std::move(cb));
}

/// c = alpha * a b + beta * c. c must have exactly the shape of matmul(a, b). c may overlap a or b
/// (gemm(1, x, x, 0, x) is x = x x): an operand that overlaps c is copied first. With beta == 0,
/// c's old values are ignored (NaN included).
template <class T, class A, class B, class C>
requires expression<A> && expression<B>
void gemm(T alpha, const A& a, const B& b, T beta, C&& c) {
  const shape_t shape = detail::matmul_shape(a.shape(), b.shape(), "gemm");
  if (!(shape == c.shape()))
    detail::raise<shape_error>("gemm: the product of ", a.shape(), " and ", b.shape(),
                               " has shape ", shape, ", the output has shape ", c.shape());
  using Dst = std::remove_cvref_t<C>;
  using V = typename Dst::value_type;
  executor<typename Dst::backend_type>::gemm(static_cast<V>(alpha), a, b, static_cast<V>(beta), c);
}

/// @}

}  // namespace meld

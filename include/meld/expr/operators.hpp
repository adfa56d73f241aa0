// The operators and functions that build expressions. Each returns a node; nothing is computed.
#pragma once

#include <type_traits>
#include <utility>

#include "functors.hpp"
#include "map.hpp"

namespace meld {

namespace detail {

// An operand of a binary operation: an expression, or a scalar that mixes with one.
template <class A, class B>
concept operand_pair = (expression<A> && (expression<B> || scalar_type<B>)) ||
                       (scalar_type<A> && expression<B>);

// Wraps an operand for a node: expressions through their closure, scalars as scalar_expr of the
// type they take next to `Other` (see scalar_promote_t).
template <class Other, class X>
auto wrap(X&& x) {
  if constexpr (expression<X>) {
    return make_closure(std::forward<X>(x));
  } else {
    using T = scalar_promote_t<value_t<Other>, std::remove_cvref_t<X>>;
    return scalar_expr<T>(static_cast<T>(x));
  }
}

// A scalar operand takes the type of the expression beside it.
template <class Op, class A, class B>
auto make_binary(A&& a, B&& b) {
  using typed_by = std::conditional_t<expression<A>, A, B>;
  return make_map(Op{}, wrap<typed_by>(std::forward<A>(a)), wrap<typed_by>(std::forward<B>(b)));
}

template <class Op, class A>
auto make_unary(A&& a, Op op = {}) {
  return make_map(op, make_closure(std::forward<A>(a)));
}

}  // namespace detail

#define MELD_BINARY_OPERATOR(OP, FUNCTOR)                                             \
  template <class A, class B>                                                         \
  requires detail::operand_pair<A, B>                                                 \
  auto operator OP(A&& a, B&& b) {                                                    \
    return detail::make_binary<ops::FUNCTOR>(std::forward<A>(a), std::forward<B>(b)); \
  }
MELD_BINARY_OPERATOR(+, plus)
MELD_BINARY_OPERATOR(-, minus)
MELD_BINARY_OPERATOR(*, multiplies)
MELD_BINARY_OPERATOR(/, divides)
MELD_BINARY_OPERATOR(<, less)
MELD_BINARY_OPERATOR(<=, less_equal)
MELD_BINARY_OPERATOR(>, greater)
MELD_BINARY_OPERATOR(>=, greater_equal)
MELD_BINARY_OPERATOR(==, equal_to)
MELD_BINARY_OPERATOR(!=, not_equal_to)
#undef MELD_BINARY_OPERATOR

/// Elementwise negation.
template <expression A>
auto operator-(A&& a) {
  return detail::make_unary<ops::negate>(std::forward<A>(a));
}

/// Elementwise logical not (1 where the element is zero, else 0).
template <expression A>
auto operator!(A&& a) {
  return detail::make_unary<ops::logical_not>(std::forward<A>(a));
}

#define MELD_BINARY_FUNCTION(NAME, FUNCTOR)                                           \
  template <class A, class B>                                                         \
  requires detail::operand_pair<A, B>                                                 \
  auto NAME(A&& a, B&& b) {                                                           \
    return detail::make_binary<ops::FUNCTOR>(std::forward<A>(a), std::forward<B>(b)); \
  }
MELD_BINARY_FUNCTION(maximum, maximum)
MELD_BINARY_FUNCTION(minimum, minimum)
MELD_BINARY_FUNCTION(pow, power)
MELD_BINARY_FUNCTION(logical_and, logical_and)
MELD_BINARY_FUNCTION(logical_or, logical_or)
#undef MELD_BINARY_FUNCTION

#define MELD_UNARY_FUNCTION(NAME)                                  \
  template <expression A>                                          \
  auto NAME(A&& a) {                                               \
    return detail::make_unary<ops::NAME##_op>(std::forward<A>(a)); \
  }
MELD_UNARY_FUNCTION(abs)
MELD_UNARY_FUNCTION(sqrt)
MELD_UNARY_FUNCTION(exp)
MELD_UNARY_FUNCTION(log)
MELD_UNARY_FUNCTION(tanh)
MELD_UNARY_FUNCTION(sin)
MELD_UNARY_FUNCTION(cos)
MELD_UNARY_FUNCTION(sigmoid)
MELD_UNARY_FUNCTION(relu)
MELD_UNARY_FUNCTION(square)

MELD_UNARY_FUNCTION(floor)
MELD_UNARY_FUNCTION(ceil)
MELD_UNARY_FUNCTION(round)
MELD_UNARY_FUNCTION(isnan)
MELD_UNARY_FUNCTION(isinf)
MELD_UNARY_FUNCTION(isfinite)
#undef MELD_UNARY_FUNCTION

/// Each element limited to [lo, hi] (numpy.clip; NaN stays NaN). lo and hi take the
/// expression's element type.
template <expression A>
auto clip(A&& a, value_t<A> lo, value_t<A> hi) {
  return detail::make_unary(std::forward<A>(a), ops::clip_op<value_t<A>>{lo, hi});
}

/// Elementwise logical not, as operator!.
template <expression A>
auto logical_not(A&& a) {
  return detail::make_unary<ops::logical_not>(std::forward<A>(a));
}

/// Converts each element to To (static_cast semantics), with floating-point to integer
/// conversions defined for every value: NaN gives 0, values beyond To's range saturate at its
/// limits, the rest truncate toward zero.
template <class To, expression A>
auto cast(A&& a) {
  return detail::make_unary<ops::cast_op<To>>(std::forward<A>(a));
}

/// Elementwise choice: a where cond holds (or is nonzero), else b. Any of a, b may be scalars.
template <expression C, class A, class B>
requires((expression<A> || scalar_type<A>)&&(expression<B> ||
                                             scalar_type<B>)) auto where(C&& cond, A&& a, B&& b) {
  // A scalar branch takes the type of the other branch (or of the condition if both are scalars).
  using other_a = std::conditional_t<expression<B>, B, C>;
  using other_b = std::conditional_t<expression<A>, A, C>;
  return detail::make_map(ops::select{}, make_closure(std::forward<C>(cond)),
                          detail::wrap<other_a>(std::forward<A>(a)),
                          detail::wrap<other_b>(std::forward<B>(b)));
}

}  // namespace meld

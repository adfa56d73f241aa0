// The operators and functions that build expressions. Each returns a node; nothing is computed.
#pragma once

#include <type_traits>
#include <utility>

#include "functors.hpp"
#include "map.hpp"

namespace meld {

/// \addtogroup expressions
/// @{

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
/// Elementwise sum of two expressions, or of an expression and a number (broadcasting).
MELD_BINARY_OPERATOR(+, plus)
/// Elementwise difference (broadcasting; either side may be a number).
MELD_BINARY_OPERATOR(-, minus)
/// Elementwise product (broadcasting; either side may be a number).
MELD_BINARY_OPERATOR(*, multiplies)
/// Elementwise quotient (broadcasting); integer division by 0 gives 0.
MELD_BINARY_OPERATOR(/, divides)
/// Elementwise a < b, a bool expression (1 where it holds, else 0).
MELD_BINARY_OPERATOR(<, less)
/// Elementwise a <= b, a bool expression (1 where it holds, else 0).
MELD_BINARY_OPERATOR(<=, less_equal)
/// Elementwise a > b, a bool expression (1 where it holds, else 0).
MELD_BINARY_OPERATOR(>, greater)
/// Elementwise a >= b, a bool expression (1 where it holds, else 0).
MELD_BINARY_OPERATOR(>=, greater_equal)
/// Elementwise a == b, a bool expression (1 where it holds, else 0).
MELD_BINARY_OPERATOR(==, equal_to)
/// Elementwise a != b, a bool expression (1 where it holds, else 0).
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
/// Elementwise maximum of a and b (numpy.maximum: a NaN on either side gives NaN).
MELD_BINARY_FUNCTION(maximum, maximum)
/// Elementwise minimum of a and b (numpy.minimum: a NaN on either side gives NaN).
MELD_BINARY_FUNCTION(minimum, minimum)
/// Elementwise a to the power b; integers to integer powers stay exact integers.
MELD_BINARY_FUNCTION(pow, power)
/// Elementwise logical and of two conditions (1 where both are nonzero, else 0).
MELD_BINARY_FUNCTION(logical_and, logical_and)
/// Elementwise logical or of two conditions (1 where either is nonzero, else 0).
MELD_BINARY_FUNCTION(logical_or, logical_or)
#undef MELD_BINARY_FUNCTION

#define MELD_UNARY_FUNCTION(NAME)                                  \
  template <expression A>                                          \
  auto NAME(A&& a) {                                               \
    return detail::make_unary<ops::NAME##_op>(std::forward<A>(a)); \
  }
/// Elementwise absolute value |a|.
MELD_UNARY_FUNCTION(abs)
/// Elementwise square root (integers in double, as numpy).
MELD_UNARY_FUNCTION(sqrt)
/// Elementwise exponential e^a (integers in double, as numpy).
MELD_UNARY_FUNCTION(exp)
/// Elementwise natural logarithm (integers in double, as numpy).
MELD_UNARY_FUNCTION(log)
/// Elementwise hyperbolic tangent (integers in double, as numpy).
MELD_UNARY_FUNCTION(tanh)
/// Elementwise sine, in radians (integers in double, as numpy).
MELD_UNARY_FUNCTION(sin)
/// Elementwise cosine, in radians (integers in double, as numpy).
MELD_UNARY_FUNCTION(cos)
/// Elementwise logistic function 1 / (1 + e^-a), which saturates to 0 and 1 without NaN.
MELD_UNARY_FUNCTION(sigmoid)
/// Elementwise max(a, 0).
MELD_UNARY_FUNCTION(relu)
/// Elementwise a * a.
MELD_UNARY_FUNCTION(square)

/// Elementwise largest integral value not above a (integers unchanged).
MELD_UNARY_FUNCTION(floor)
/// Elementwise smallest integral value not below a (integers unchanged).
MELD_UNARY_FUNCTION(ceil)
/// Elementwise rounding to the nearest integral value, half to even as numpy.round (2.5 gives 2).
MELD_UNARY_FUNCTION(round)
/// Elementwise test for NaN, a bool expression (integers: never).
MELD_UNARY_FUNCTION(isnan)
/// Elementwise test for an infinity, a bool expression (integers: never).
MELD_UNARY_FUNCTION(isinf)
/// Elementwise test for a finite value, a bool expression (integers: always).
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

/// @}

}  // namespace meld

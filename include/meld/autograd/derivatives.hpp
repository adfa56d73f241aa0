// The derivative of every elementwise operation of expr/functors.hpp, as data per functor (as
// PyTorch's derivatives.yaml): derivative<Op>::partial<J>(g, a...) is the expression g * dOp/da_J
// evaluated at the operands a... (subtrees, recomputed where the gradient is evaluated), or
// no_gradient for operands that carry none (comparisons, logic, where's condition, integer casts).
//
// A functor without a rule here fails to compile where an expression using it is differentiated,
// with the functor's name in the instantiation trace: specialize derivative<Op> for it.
#pragma once

#include <cstddef>
#include <type_traits>

#include "../expr/functors.hpp"
#include "../expr/operators.hpp"

namespace meld::autograd {

/// \addtogroup autograd
/// @{

/// The marker of an operand through which no gradient flows.
struct no_gradient {};

/// Always false: the condition of the static_assert that an operation without a rule fails.
template <class>
inline constexpr bool no_derivative_rule = false;

/// The rule for functor Op (see above). Specializations define
/// `template <std::size_t J, class G, class... A> static auto partial(const G& g, const A&... a)`.
template <class Op>
struct derivative {
  static_assert(no_derivative_rule<Op>,
                "meld::autograd: this elementwise operation has no derivative rule; specialize "
                "meld::autograd::derivative<Op> (autograd/derivatives.hpp) for the functor named "
                "in the trace below");
};

/// @cond derivative_rules
// (The rules themselves are read in this file, one specialization per functor, not in the API
// reference.)
namespace detail {
// Operations through which no gradient flows.
struct non_differentiable {
  template <std::size_t J, class G, class... A>
  static no_gradient partial(const G&, const A&...) {
    return {};
  }
};
template <class G>
using grad_value_t = value_t<G>;
}  // namespace detail

template <>
struct derivative<ops::less> : detail::non_differentiable {};
template <>
struct derivative<ops::less_equal> : detail::non_differentiable {};
template <>
struct derivative<ops::greater> : detail::non_differentiable {};
template <>
struct derivative<ops::greater_equal> : detail::non_differentiable {};
template <>
struct derivative<ops::equal_to> : detail::non_differentiable {};
template <>
struct derivative<ops::not_equal_to> : detail::non_differentiable {};
template <>
struct derivative<ops::logical_and> : detail::non_differentiable {};
template <>
struct derivative<ops::logical_or> : detail::non_differentiable {};
template <>
struct derivative<ops::logical_not> : detail::non_differentiable {};

template <>
struct derivative<ops::plus> {
  template <std::size_t J, class G, class A, class C>
  static auto partial(const G& g, const A&, const C&) {
    return g;
  }
};

template <>
struct derivative<ops::minus> {
  template <std::size_t J, class G, class A, class C>
  static auto partial(const G& g, const A&, const C&) {
    if constexpr (J == 0)
      return g;
    else
      return -g;
  }
};

template <>
struct derivative<ops::multiplies> {
  template <std::size_t J, class G, class A, class C>
  static auto partial(const G& g, const A& a, const C& c) {
    if constexpr (J == 0)
      return g * c;
    else
      return g * a;
  }
};

template <>
struct derivative<ops::divides> {
  template <std::size_t J, class G, class A, class C>
  static auto partial(const G& g, const A& a, const C& c) {
    if constexpr (J == 0)
      return g / c;
    else
      return -(g * a) / (c * c);
  }
};

template <>
struct derivative<ops::negate> {
  template <std::size_t J, class G, class A>
  static auto partial(const G& g, const A&) {
    return -g;
  }
};

// where(c, a, b): the gradient goes to the branch that was chosen.
template <>
struct derivative<ops::select> {
  template <std::size_t J, class G, class C, class A, class D>
  static auto partial(const G& g, const C& c, const A&, const D&) {
    using T = detail::grad_value_t<G>;
    if constexpr (J == 0)
      return no_gradient{};
    else if constexpr (J == 1)
      return where(c, g, T(0));
    else
      return where(c, T(0), g);
  }
};

template <>
struct derivative<ops::exp_op> {
  template <std::size_t J, class G, class A>
  static auto partial(const G& g, const A& a) {
    return g * exp(a);
  }
};

template <>
struct derivative<ops::log_op> {
  template <std::size_t J, class G, class A>
  static auto partial(const G& g, const A& a) {
    return g / a;
  }
};

template <>
struct derivative<ops::sqrt_op> {
  template <std::size_t J, class G, class A>
  static auto partial(const G& g, const A& a) {
    using T = detail::grad_value_t<G>;
    return g * T(0.5) / sqrt(a);
  }
};

template <>
struct derivative<ops::tanh_op> {
  template <std::size_t J, class G, class A>
  static auto partial(const G& g, const A& a) {
    using T = detail::grad_value_t<G>;
    return g * (T(1) - square(tanh(a)));
  }
};

template <>
struct derivative<ops::sin_op> {
  template <std::size_t J, class G, class A>
  static auto partial(const G& g, const A& a) {
    return g * cos(a);
  }
};

template <>
struct derivative<ops::cos_op> {
  template <std::size_t J, class G, class A>
  static auto partial(const G& g, const A& a) {
    return -(g * sin(a));
  }
};

template <>
struct derivative<ops::sigmoid_op> {
  template <std::size_t J, class G, class A>
  static auto partial(const G& g, const A& a) {
    using T = detail::grad_value_t<G>;
    return g * sigmoid(a) * (T(1) - sigmoid(a));
  }
};

// d|a| = sign(a), 0 at 0 (as PyTorch).
template <>
struct derivative<ops::abs_op> {
  template <std::size_t J, class G, class A>
  static auto partial(const G& g, const A& a) {
    using T = detail::grad_value_t<G>;
    return where(a > T(0), g, where(a < T(0), -g, T(0)));
  }
};

template <>
struct derivative<ops::square_op> {
  template <std::size_t J, class G, class A>
  static auto partial(const G& g, const A& a) {
    using T = detail::grad_value_t<G>;
    return T(2) * g * a;
  }
};

// 0 at 0 (as PyTorch).
template <>
struct derivative<ops::relu_op> {
  template <std::size_t J, class G, class A>
  static auto partial(const G& g, const A& a) {
    using T = detail::grad_value_t<G>;
    return where(a > T(0), g, T(0));
  }
};

// Ties split the gradient evenly between the two operands (as PyTorch's maximum / minimum).
template <>
struct derivative<ops::maximum> {
  template <std::size_t J, class G, class A, class C>
  static auto partial(const G& g, const A& a, const C& c) {
    using T = detail::grad_value_t<G>;
    if constexpr (J == 0)
      return where(a > c, g, where(a == c, T(0.5) * g, T(0)));
    else
      return where(c > a, g, where(a == c, T(0.5) * g, T(0)));
  }
};

template <>
struct derivative<ops::minimum> {
  template <std::size_t J, class G, class A, class C>
  static auto partial(const G& g, const A& a, const C& c) {
    using T = detail::grad_value_t<G>;
    if constexpr (J == 0)
      return where(a < c, g, where(a == c, T(0.5) * g, T(0)));
    else
      return where(c < a, g, where(a == c, T(0.5) * g, T(0)));
  }
};

// d a^c / da = c a^(c-1); d a^c / dc = a^c log a, taken as 0 where a == 0 and c >= 0 (the limit;
// PyTorch does the same).
template <>
struct derivative<ops::power> {
  template <std::size_t J, class G, class A, class C>
  static auto partial(const G& g, const A& a, const C& c) {
    using T = detail::grad_value_t<G>;
    if constexpr (J == 0)
      return g * c * pow(a, c - T(1));
    else
      return where(logical_and(a == T(0), c >= T(0)), T(0), g * pow(a, c) * log(a));
  }
};

// A cast between floating types passes the gradient back in the operand's type; from integers,
// nothing.
template <class To>
struct derivative<ops::cast_op<To>> {
  template <std::size_t J, class G, class A>
  static auto partial(const G& g, const A&) {
    if constexpr (std::is_floating_point_v<value_t<A>> && std::is_floating_point_v<To>)
      return cast<value_t<A>>(g);
    else
      return no_gradient{};
  }
};
/// @endcond

/// @}

}  // namespace meld::autograd

// Expression nodes: an operation applied elementwise to one, two or three operands.
// A node stores its operands (see operand_closure) and nothing else, so that trees stay small and
// cheap to build (storing a shape per node made building a 5-operation expression cost ~100 ns
// of copies). Building a node checks that its operands' shapes broadcast; shape() computes the
// result shape when asked.
//
// Every expression also answers uniform_shape(): a pointer to the shape that all its leaves share
// (scalars match any shape: detail::any_shape), or null when it broadcasts. It costs no copies,
// and is what the common case (operands of one shape) runs on.
#pragma once

#include <type_traits>
#include <utility>

#include "../core/broadcast.hpp"
#include "expression.hpp"

namespace meld {

namespace detail {

// Whether an operand can be evaluated on SIMD batches of S (see ops::*::simd). Leaves and
// scalars qualify when their element type is S; nodes ask their operation.
template <class E, class S, class = void>
struct simd_capable : std::bool_constant<std::is_same_v<value_t<E>, S>> {};
template <class E, class S>
struct simd_capable<E, S, std::void_t<decltype(E::template simd_for<S>)>>
    : std::bool_constant<E::template simd_for<S>> {};

template <class E, class = void>
struct cost_of : std::integral_constant<int, 0> {};
template <class E>
struct cost_of<E, std::void_t<decltype(E::cost)>> : std::integral_constant<int, E::cost> {};

template <class V, class S>
inline constexpr bool batch_value = std::is_same_v<V, S> || std::is_same_v<V, bool>;

// The uniform shape of two operands whose uniform shapes are a and b (see above).
MELD_INLINE const shape_t* common_uniform(const shape_t* a, const shape_t* b) {
  if (!a || !b) return nullptr;
  if (a == &any_shape) return b;
  if (b == &any_shape || a == b || *a == *b) return a;
  return nullptr;
}

}  // namespace detail

template <class Op, class A>
class unary_expr : public expression_tag {
 public:
  using value_type = std::remove_cvref_t<decltype(std::declval<Op>()(std::declval<value_t<A>>()))>;
  using backend_type = backend_t<A>;
  static constexpr int cost = Op::cost + detail::cost_of<A>::value;
  template <class S>
  static constexpr bool simd_for = detail::batch_value<value_type, S>&&
      Op::template simd<S, value_t<A>>&& detail::simd_capable<A, S>::value;

  unary_expr(Op op, A a) : op_(op), a_(std::move(a)) {}

  decltype(auto) shape() const { return a_.shape(); }
  const shape_t* uniform_shape() const { return a_.uniform_shape(); }
  const Op& op() const { return op_; }
  const A& operand() const { return a_; }

 private:
  [[no_unique_address]] Op op_;
  A a_;
};

template <class Op, class A, class B>
class binary_expr : public expression_tag {
 public:
  using value_type = std::remove_cvref_t<decltype(std::declval<Op>()(std::declval<value_t<A>>(),
                                                                     std::declval<value_t<B>>()))>;
  using backend_type = common_backend_t<backend_t<A>, backend_t<B>>;
  static constexpr int cost = Op::cost + detail::cost_of<A>::value + detail::cost_of<B>::value;
  template <class S>
  static constexpr bool simd_for =
      detail::batch_value<value_type, S>&& Op::template simd<S, value_t<A>, value_t<B>>&&
          detail::simd_capable<A, S>::value&& detail::simd_capable<B, S>::value;

  binary_expr(Op op, A a, B b) : op_(op), a_(std::move(a)), b_(std::move(b)) {
    if (!uniform_shape()) (void)shape();  // throws shape_error when they do not broadcast
  }

  const shape_t* uniform_shape() const {
    return detail::common_uniform(a_.uniform_shape(), b_.uniform_shape());
  }
  shape_t shape() const {
    if (const shape_t* u = uniform_shape()) return *u;
    return broadcast_shapes(a_.shape(), b_.shape(), name());
  }
  const Op& op() const { return op_; }
  const A& lhs() const { return a_; }
  const B& rhs() const { return b_; }

 private:
  static const char* name() {
    if constexpr (requires { Op::name; })
      return Op::name;
    else
      return "elementwise operation";
  }
  [[no_unique_address]] Op op_;
  A a_;
  B b_;
};

template <class Op, class A, class B, class C>
class ternary_expr : public expression_tag {
 public:
  using value_type = std::remove_cvref_t<decltype(std::declval<Op>()(
      std::declval<value_t<A>>(), std::declval<value_t<B>>(), std::declval<value_t<C>>()))>;
  using backend_type = common_backend_t<backend_t<A>, backend_t<B>, backend_t<C>>;
  static constexpr int cost =
      Op::cost + detail::cost_of<A>::value + detail::cost_of<B>::value + detail::cost_of<C>::value;
  template <class S>
  static constexpr bool simd_for = detail::batch_value<value_type, S>&&
      Op::template simd<S, value_t<A>, value_t<B>, value_t<C>>&& detail::simd_capable<A, S>::value&&
          detail::simd_capable<B, S>::value&& detail::simd_capable<C, S>::value;

  ternary_expr(Op op, A a, B b, C c)
      : op_(op), a_(std::move(a)), b_(std::move(b)), c_(std::move(c)) {
    if (!uniform_shape()) (void)shape();  // throws shape_error when they do not broadcast
  }

  const shape_t* uniform_shape() const {
    return detail::common_uniform(detail::common_uniform(a_.uniform_shape(), b_.uniform_shape()),
                                  c_.uniform_shape());
  }
  shape_t shape() const {
    if (const shape_t* u = uniform_shape()) return *u;
    return broadcast_shapes(broadcast_shapes(a_.shape(), b_.shape(), Op::name), c_.shape(),
                            Op::name);
  }
  const Op& op() const { return op_; }
  const A& first() const { return a_; }
  const B& second() const { return b_; }
  const C& third() const { return c_; }

 private:
  [[no_unique_address]] Op op_;
  A a_;
  B b_;
  C c_;
};

}  // namespace meld

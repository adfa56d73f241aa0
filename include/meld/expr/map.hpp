// map_expr: an elementwise operation applied to n operands, the one interior node of fused
// expressions (unary, binary and ternary operations are map_expr of one, two and three operands).
//
// A node stores its operation and its operands (see operand_closure) and nothing else, so that
// trees stay small and cheap to build (storing a shape per node made building a 5-operation
// expression cost ~100 ns of copies). shape() computes the result shape when asked.
//
// Every expression also answers uniform_shape(): a pointer to the shape that all its leaves share
// (scalars match any shape: detail::any_shape), or null when it broadcasts. It costs no copies,
// and is what the common case (operands of one shape) runs on.
//
// The same node type carries the backends' lowered trees: transform() rebuilds a node over other
// operands (a CPU cursor, a CUDA device leaf), and apply() evaluates it on whatever its operands
// give. Those two are host-and-device functions, so a lowered tree runs inside a CUDA kernel.
#pragma once

#include <cstddef>
#include <type_traits>
#include <utility>

#include "../core/broadcast.hpp"
#include "expression.hpp"

#if defined(__CUDACC__)
// apply() and transform() call whatever their caller passes (host lambdas in host code).
#define MELD_EXEC_CHECK_DISABLE _Pragma("nv_exec_check_disable")
#else
#define MELD_EXEC_CHECK_DISABLE
#endif

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

// Whether a node of value type V computes on batches of S: its own type, bool (comparisons), or
// the float in which bfloat16 and half compute (a cast to them).
template <class V, class S>
inline constexpr bool batch_value = std::is_same_v<compute_t<V>, S> || std::is_same_v<V, bool>;

// The uniform shape of two operands whose uniform shapes are a and b (see above).
MELD_INLINE const shape_t* common_uniform(const shape_t* a, const shape_t* b) {
  if (!a || !b) return nullptr;
  if (a == &any_shape) return b;
  if (b == &any_shape || a == b || *a == *b) return a;
  return nullptr;
}

// The operands of a node: a minimal tuple that is an aggregate, trivially copyable when its
// members are, and usable in device code (std::tuple is neither of the last two everywhere).
template <std::size_t I, class T>
struct operand_slot {
  T value;
};

template <class Indices, class... A>
struct operand_list;
template <std::size_t... I, class... A>
struct operand_list<std::index_sequence<I...>, A...> : operand_slot<I, A>... {};

template <std::size_t I, class T>
MELD_HD MELD_INLINE constexpr const T& slot(const operand_slot<I, T>& s) {
  return s.value;
}
template <std::size_t I, class T>
MELD_HD MELD_INLINE constexpr T& slot(operand_slot<I, T>& s) {
  return s.value;
}

// Selects map_expr's constructor that builds each operand in place (map_expr::transform).
struct transform_tag {};

template <class Op>
constexpr const char* operation_name() {
  if constexpr (requires { Op::name; })
    return Op::name;
  else
    return "elementwise operation";
}

}  // namespace detail

template <class... A>
using operands = detail::operand_list<std::index_sequence_for<A...>, A...>;

template <class Op, class... A>
class map_expr : public expression_tag {
  static_assert(sizeof...(A) >= 1, "meld::map_expr: an operation needs an operand");
  using indices = std::index_sequence_for<A...>;

 public:
  // Operations compute in their operands' compute types (float for bfloat16 and half).
  using value_type = std::remove_cvref_t<decltype(std::declval<const Op&>()(
      std::declval<detail::compute_t<value_t<A>>>()...))>;
  using backend_type = common_backend_t<backend_t<A>...>;
  using operation = Op;
  static constexpr bool composite = true;  // see expr/walk.hpp
  static constexpr int arity = sizeof...(A);
  static constexpr int cost = Op::cost + (detail::cost_of<A>::value + ...);
  template <class S>
  static constexpr bool simd_for =
      detail::batch_value<value_type, S>&& Op::template simd<S, detail::compute_t<value_t<A>>...> &&
      (detail::simd_capable<A, S>::value && ...);

  // Unchecked: the functions that build expressions check that the shapes broadcast
  // (detail::checked); lowered trees have no shapes to check.
  MELD_HD map_expr(Op op, operands<A...> args)
      : op_(op), args_(static_cast<operands<A...>&&>(args)) {}

  MELD_HD const Op& op() const { return op_; }
  template <std::size_t I>
  MELD_HD const auto& operand() const {
    return detail::slot<I>(args_);
  }
  template <std::size_t I>
  MELD_HD auto& operand() {
    return detail::slot<I>(args_);
  }

  // op(f(a0), f(a1), ...): the node evaluated on what f makes of each operand.
  MELD_EXEC_CHECK_DISABLE
  template <class F>
  MELD_HD MELD_INLINE auto apply(const F& f) const {
    return apply(f, indices{});
  }

  // The same operation over f(a0), f(a1), ..., which f computes in operand order.
  MELD_EXEC_CHECK_DISABLE
  template <class F>
  MELD_HD auto transform(F&& f) const {
    return transform(f, indices{});
  }

  // Calls f(a) for each operand, in order.
  template <class F>
  MELD_INLINE void for_each_operand(F&& f) const {
    for_each_operand(f, indices{});
  }
  template <class F>
  MELD_INLINE void for_each_operand(F&& f) {
    for_each_operand(f, indices{});
  }

  const shape_t* uniform_shape() const { return uniform_shape(indices{}); }
  // Not inlined: the broadcasting shape is asked in several places (each node as it is built, the
  // assignment, the tensor it constructs), and a tree inlined into each compiled the walk of every
  // subtree once per node above it. (The common case, operands of one shape, stops at
  // uniform_shape, inlined.)
  MELD_NOINLINE shape_t shape() const {
    if (const shape_t* u = uniform_shape()) return *u;
    return shape(indices{});
  }

 private:
  MELD_EXEC_CHECK_DISABLE
  template <class F, std::size_t... I>
  MELD_HD MELD_INLINE auto apply(const F& f, std::index_sequence<I...>) const {
    return op_(f(detail::slot<I>(args_))...);
  }
  MELD_EXEC_CHECK_DISABLE
  template <class F, std::size_t... I>
  MELD_HD auto transform(F& f, std::index_sequence<I...>) const {
    using result = map_expr<Op, std::remove_cvref_t<decltype(f(detail::slot<I>(args_)))>...>;
    return result(detail::transform_tag{}, op_, args_, f, indices{});
  }
  // Each operand is initialized from f's result in place, not moved in: a rebuilt tree (the
  // views captured by queued work, 168 bytes each) is built once. A braced list evaluates its
  // elements in order (function arguments would not).
  MELD_EXEC_CHECK_DISABLE
  template <class Src, class F, std::size_t... I>
  MELD_HD map_expr(detail::transform_tag, const Op& op, const Src& src, F& f,
                   std::index_sequence<I...>)
      : op_(op), args_{{f(detail::slot<I>(src))}...} {}
  template <class, class...>
  friend class map_expr;
  template <class F, std::size_t... I>
  MELD_INLINE void for_each_operand(F& f, std::index_sequence<I...>) const {
    (f(detail::slot<I>(args_)), ...);
  }
  template <class F, std::size_t... I>
  MELD_INLINE void for_each_operand(F& f, std::index_sequence<I...>) {
    (f(detail::slot<I>(args_)), ...);
  }
  template <std::size_t I0, std::size_t... I>
  const shape_t* uniform_shape(std::index_sequence<I0, I...>) const {
    const shape_t* u = detail::slot<I0>(args_).uniform_shape();
    ((u = detail::common_uniform(u, detail::slot<I>(args_).uniform_shape())), ...);
    return u;
  }
  template <std::size_t I0, std::size_t... I>
  shape_t shape(std::index_sequence<I0, I...>) const {
    shape_t s = detail::slot<I0>(args_).shape();
    ((s = broadcast_shapes(s, detail::slot<I>(args_).shape(), detail::operation_name<Op>())), ...);
    return s;
  }

  [[no_unique_address]] Op op_;
  operands<A...> args_;
};

// The nodes by arity, for code that reads better with a name.
template <class Op, class A>
using unary_expr = map_expr<Op, A>;
template <class Op, class A, class B>
using binary_expr = map_expr<Op, A, B>;
template <class Op, class A, class B, class C>
using ternary_expr = map_expr<Op, A, B, C>;

template <class E>
inline constexpr bool is_map_expr = false;
template <class Op, class... A>
inline constexpr bool is_map_expr<map_expr<Op, A...>> = true;

namespace detail {

// Throws shape_error where node's operands do not broadcast. The node is taken by value: the
// caller's own stays in registers (passing its address made the common path store it and copy it
// back through memory, 20 % of a 1000-element dot product).
template <class Node>
[[gnu::cold]] MELD_NOINLINE void check_broadcast(Node node) {
  (void)node.shape();
}

// A node over the given operands whose shapes are checked to broadcast (throws shape_error).
template <class Op, class... A>
map_expr<Op, A...> make_map(Op op, A... a) {
  map_expr<Op, A...> node(op, {{static_cast<A&&>(a)}...});
  if (!node.uniform_shape()) [[unlikely]]
    check_broadcast(node);
  return node;
}

}  // namespace detail
}  // namespace meld

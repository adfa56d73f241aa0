// The one generic walk over expression trees, which every backend lowers expressions with.
//
// Composite nodes (map_expr, reduce_expr, matmul_expr) declare `composite` and offer
// transform(f) (the same node over f(operand)...) and for_each_operand(f). Everything else is a
// leaf: a tensor, a view, an lvalue tensor's reference, a scalar. On top of that:
//
//   transform_leaves(e, f)  e with every leaf x replaced by f(x), through every node: how the
//                           asynchronous policies capture an expression (views that own their
//                           storage) and how the simulated device translates it to host views
//   for_each_leaf(e, f)     f(x) for every leaf, in tree order (ordering state, devices, aliasing)
//   lower(e, f)             the fused part of e, the tree of map nodes, with every input x of
//                           that kernel (a leaf, or a reduction along an axis or a product, which
//                           are evaluated on their own first) replaced by f(x): the CPU cursor,
//                           the CUDA device tree
//   for_each_input(e, f)    f(x) for every input of that kernel, in the order lower() visits them
//   evaluate(t, read)       the value of a lowered tree, reading each input with read(x): the
//                           inner loop of the CPU kernels and of the CUDA kernels
//
// A backend adapts leaves; it never walks nodes itself, so a new elementwise function or node
// needs nothing from the backends.
#pragma once

#include <type_traits>
#include <utility>

#include "map.hpp"

namespace meld {

/// An expression with operands (a node, not a leaf): its `transform(f)` rebuilds it over f
/// applied to each operand, which is how transform_leaves walks a tree down to its leaves.
template <class E>
concept composite_expression = std::remove_cvref_t<E>::composite;

template <class E, class F>
auto transform_leaves(const E& e, F&& f) {
  if constexpr (composite_expression<E>)
    return e.transform([&](const auto& operand) { return transform_leaves(operand, f); });
  else
    return f(e);
}

template <class E, class F>
void for_each_leaf(const E& e, F&& f) {
  if constexpr (composite_expression<E>)
    e.for_each_operand([&](const auto& operand) { for_each_leaf(operand, f); });
  else
    f(e);
}

namespace detail {
// Rebuilds the map nodes of a tree over f(input) (host and device code).
template <class F>
struct input_mapper {
  const F& f;
  MELD_EXEC_CHECK_DISABLE
  template <class E>
  MELD_HD auto operator()(const E& e) const {
    if constexpr (is_map_expr<E>)
      return e.transform(*this);
    else
      return f(e);
  }
};
}  // namespace detail

MELD_EXEC_CHECK_DISABLE
template <class E, class F>
MELD_HD auto lower(const E& e, const F& f) {
  return detail::input_mapper<F>{f}(e);
}

template <class E, class F>
MELD_INLINE void for_each_input(E&& e, F&& f) {
  if constexpr (is_map_expr<std::remove_cvref_t<E>>)
    e.for_each_operand([&](auto&& operand) { for_each_input(operand, f); });
  else
    f(e);
}

namespace detail {
// Applies a read function at the inputs of a lowered tree and the nodes' operations above them.
template <class Read>
struct evaluator {
  const Read& read;
  MELD_EXEC_CHECK_DISABLE
  template <class E>
  MELD_HD MELD_INLINE auto operator()(const E& e) const {
    if constexpr (is_map_expr<E>)
      return e.apply(*this);
    else
      return read(e);
  }
};
}  // namespace detail

MELD_EXEC_CHECK_DISABLE
template <class E, class Read>
MELD_HD MELD_INLINE auto evaluate(const E& tree, const Read& read) {
  return detail::evaluator<Read>{read}(tree);
}

// The number of inputs of a lowered tree for which Counted<input>::value holds.
template <template <class> class Counted, class E>
struct count_inputs : std::integral_constant<int, Counted<E>::value ? 1 : 0> {};
template <template <class> class Counted, class Op, class... A>
struct count_inputs<Counted, map_expr<Op, A...>>
    : std::integral_constant<int, (count_inputs<Counted, A>::value + ... + 0)> {};

}  // namespace meld

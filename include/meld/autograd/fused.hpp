// The fused backward of an elementwise expression, derived at compile time from its tree.
//
// `variable y = a * x + exp(z) * sigmoid(w);` evaluates the tree in one loop and records one node
// holding the tree itself (its variables, and views of any tensors in it; nothing computed is
// saved). Its backward numbers the leaves in tree order and builds, for each leaf K that is a
// variable requiring a gradient, the expression of the path from the root to K: the chain rule
// applied node by node with derivative<Op> (autograd/derivatives.hpp), each intermediate value a
// recomputed subtree:
//
//   dx = g * a        dz = g * sigmoid(w) * exp(z)        dw = g * exp(z) * sigmoid(w) * (1 - ...)
//
// Each is one fused loop that writes (or adds into) that input's gradient, reading only g and the
// inputs; an input broadcast in the forward pass has its gradient summed over the broadcast axes
// in the same loop (a fused reduction). A variable that is several leaves (x * x, or the argument
// of gelu(x), which uses x four times) gets the sum of its paths in one loop.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "../expr/walk.hpp"
#include "../tensor/assign_each.hpp"
#include "derivatives.hpp"
#include "node.hpp"
#include "variable.hpp"

namespace meld::autograd {

/// \addtogroup autograd
/// @{

namespace detail {

// Leaves of the tree that is evaluated: each variable's value, as a view.
struct value_leaf {
  template <class L>
  auto operator()(const L& leaf) const {
    if constexpr (is_variable<L>)
      return leaf.value().view();
    else
      return leaf;
  }
};

// The number of leaves of a tree (anything that is not a map node is one leaf).
template <class E>
struct leaf_count : std::integral_constant<std::size_t, 1> {};
template <class Op, class... A>
struct leaf_count<map_expr<Op, A...>>
    : std::integral_constant<std::size_t, (leaf_count<A>::value + ...)> {};

// Which operand of a node over A... holds leaf K of the node, and the number of leaves before it.
// (A free function: clang does not evaluate a static member function of a class that is still
// being defined.)
template <std::size_t K, class... A>
constexpr std::pair<std::size_t, std::size_t> locate_leaf() {
  constexpr std::size_t counts[] = {leaf_count<A>::value...};
  std::size_t before = 0;
  for (std::size_t j = 0; j < sizeof...(A); ++j) {
    if (K < before + counts[j]) return {j, before};
    before += counts[j];
  }
  return {sizeof...(A), before};
}
template <std::size_t K, class... A>
struct locate {
  static constexpr std::size_t operand = locate_leaf<K, A...>().first;
  static constexpr std::size_t offset = locate_leaf<K, A...>().second;
};

template <std::size_t K, class E>
const auto& leaf_at(const E& e);

template <std::size_t K, class Op, class... A>
const auto& leaf_at_node(const map_expr<Op, A...>& e) {
  using L = locate<K, A...>;
  return leaf_at<K - L::offset>(e.template operand<L::operand>());
}

// Leaf K of tree e.
template <std::size_t K, class E>
const auto& leaf_at(const E& e) {
  if constexpr (is_map_expr<E>)
    return leaf_at_node<K>(e);
  else
    return e;
}

template <std::size_t K, class E, class G>
auto path_gradient(const E& e, const G& g);

template <std::size_t J, class Op, class... A, class G, std::size_t... I>
auto partial_of(const map_expr<Op, A...>& e, const G& g, std::index_sequence<I...>) {
  return derivative<Op>::template partial<J>(g, e.template operand<I>()...);
}

template <std::size_t K, class Op, class... A, class G>
auto path_gradient_node(const map_expr<Op, A...>& e, const G& g) {
  using L = locate<K, A...>;
  auto d = partial_of<L::operand>(e, g, std::index_sequence_for<A...>{});
  if constexpr (std::is_same_v<decltype(d), no_gradient>)
    return no_gradient{};
  else
    return path_gradient<K - L::offset>(e.template operand<L::operand>(), d);
}

// The gradient reaching leaf K of tree e when the gradient of e is g (an expression), or
// no_gradient when the path crosses an operation that passes none.
template <std::size_t K, class E, class G>
auto path_gradient(const E& e, const G& g) {
  if constexpr (is_map_expr<E>)
    return path_gradient_node<K>(e, g);
  else
    return g;
}

// No reduction or product over variables may hide inside a fused tree: its gradient would be
// lost. (meld::sum / meld::matmul called qualified build them; the autograd overloads, found
// unqualified, do not.)
template <class E>
struct only_map_nodes_over_variables : std::true_type {};
template <class Op, class... A>
struct only_map_nodes_over_variables<map_expr<Op, A...>>
    : std::bool_constant<(only_map_nodes_over_variables<A>::value && ...)> {};
template <class R, class A>
struct only_map_nodes_over_variables<reduce_expr<R, A>>
    : std::bool_constant<!contains_variable<A>::value> {};
template <class A, class C>
struct only_map_nodes_over_variables<matmul_expr<A, C>>
    : std::bool_constant<!contains_variable<A>::value && !contains_variable<C>::value> {};

/// The node of a fused elementwise expression (see above).
template <class T, class B, class Tree>
class fused_node final : public node<T, B> {
 public:
  explicit fused_node(Tree tree) : tree_(std::move(tree)) {
    for_each_leaf(*tree_, [&](const auto& leaf) {
      if constexpr (is_variable<std::remove_cvref_t<decltype(leaf)>>)
        this->inputs_.push_back(leaf.state_handle());
    });
  }

  void backward(const tensor<T, B>& grad_output) override {
    const Tree& tree = *tree_;
    const auto values = transform_leaves(tree, value_leaf{});
    const auto g = grad_output.view();
    std::array<variable_state<T, B>*, leaves> state{};
    find_states(tree, state, std::make_index_sequence<leaves>{});
    if (backward_in_one_pass(values, g, state)) return;
    std::array<bool, leaves> done{};
    backward_leaves(values, g, state, done, std::make_index_sequence<leaves>{});
  }

  std::string name() const override { return "an elementwise expression"; }

 private:
  static constexpr std::size_t leaves = leaf_count<Tree>::value;

  template <std::size_t K, class V, class G>
  using path_t = decltype(path_gradient<K>(std::declval<const V&>(), std::declval<const G&>()));

  // Whether leaf K is a variable that a gradient reaches (known from the tree's type).
  template <std::size_t K>
  static constexpr bool reached() {
    using L = std::remove_cvref_t<decltype(leaf_at<K>(std::declval<const Tree&>()))>;
    if constexpr (!is_variable<L>) {
      return false;
    } else {
      static_assert(std::is_same_v<value_t<L>, T>,
                    "meld::autograd: every variable of one expression must have the same element "
                    "type");
      using V = decltype(transform_leaves(std::declval<const Tree&>(), value_leaf{}));
      using G = tensor_view<const T, B>;
      return !std::is_same_v<path_t<K, V, G>, no_gradient>;
    }
  }

  // Whether a leaf after K is reached too (else leaf K's variable has one path, and the masked
  // sum of several is not compiled: a kernel fewer per leaf, for every expression users write).
  template <std::size_t K, std::size_t J = K + 1>
  static constexpr bool reached_later() {
    if constexpr (J >= leaves)
      return false;
    else
      return reached<J>() || reached_later<K, J + 1>();
  }

  template <std::size_t... K>
  void find_states(const Tree& tree, std::array<variable_state<T, B>*, leaves>& state,
                   std::index_sequence<K...>) {
    auto one = [&]<std::size_t I>(std::integral_constant<std::size_t, I>) {
      if constexpr (reached<I>()) {
        variable_state<T, B>* s = leaf_at<I>(tree).state_handle().get();
        if (s->requires_grad) state[I] = s;
      }
    };
    (one(std::integral_constant<std::size_t, K>{}), ...);
  }

  template <class V, class G, std::size_t... K>
  void backward_leaves(const V& values, const G& g,
                       const std::array<variable_state<T, B>*, leaves>& state,
                       std::array<bool, leaves>& done, std::index_sequence<K...>) {
    (backward_leaf<K>(values, g, state, done), ...);
  }

  // The gradient of the variable at leaf K, unless an earlier leaf was the same variable: its one
  // path, or, for a variable at several leaves, the sum of their paths. Where the variable is
  // at least half the reached leaves (x in GELU's x * (1 + tanh(x + x*x*x))), the sum is one loop:
  // a sum over every reached leaf, each selected by a mask that is 1 where the leaf is this
  // variable, which reads and writes the gradient once where a loop per path would do it per
  // path. Otherwise (v in a*x + exp(z) - v*v) it is a loop per path, so that the masked sum does
  // not compute the many paths of other variables. The masked sum is one expression for the whole
  // tree, whichever variable it is for: one per leaf (from K on) would compile a number of paths
  // that grows with the square of the leaves (GELU of a biased product has 8).
  template <std::size_t K, class V, class G>
  void backward_leaf(const V& values, const G& g,
                     const std::array<variable_state<T, B>*, leaves>& state,
                     std::array<bool, leaves>& done) {
    if constexpr (reached<K>()) {
      variable_state<T, B>* s = state[K];
      if (!s || done[K]) return;
      std::array<T, leaves> mask{};
      std::size_t uses = 0;
      for (std::size_t j = K; j < leaves; ++j)
        if (state[j] == s) {
          mask[j] = T(1);
          done[j] = true;
          ++uses;
        }
      if constexpr (!reached_later<K>()) {
        accumulate(*s, path_gradient<K>(values, g));  // the only leaf this variable can be
      } else if (uses == 1) {
        accumulate(*s, path_gradient<K>(values, g));
      } else if (2 * uses >= reached_count()) {
        accumulate(*s, masked_sum<0>(values, g, mask));
      } else {
        each_path<K>(values, g, *s, mask, std::make_index_sequence<leaves - K>{});
      }
    }
  }

  // The reached leaves, in tree order.
  static constexpr auto reached_leaves() {
    std::array<std::size_t, reached_count()> out{};
    std::size_t j = 0;
    [&]<std::size_t... K>(std::index_sequence<K...>) {
      ((reached<K>() ? void(out[j++] = K) : void()), ...);
    }
    (std::make_index_sequence<leaves>{});
    return out;
  }

  // Where every reached leaf is a variable of the output's shape (no sum over broadcast axes), one
  // pass writes every path's gradient (meld::assign_each): g and the inputs are read from memory
  // once, not once per input. Where every gradient is added to (a leaf's, or a pending sum; the
  // leaves of one variable one after another into the same destination), the pass adds, moving
  // the least bytes. Otherwise (fresh gradients, alone or among added ones) it writes each interior
  // result's first gradient in place and every other path into a tensor of its own, added next.
  // Returns false, doing nothing, where a reached leaf requires no gradient or a variable's shape
  // differs from the output's.
  template <class V, class G>
  bool backward_in_one_pass(const V& values, const G& g,
                            const std::array<variable_state<T, B>*, leaves>& state) {
    constexpr std::size_t m = reached_count();
    if constexpr (m < 2) {
      return false;
    } else {
      return [&]<std::size_t... J>(std::index_sequence<J...>) {
        constexpr std::array<std::size_t, m> at = reached_leaves();
        variable_state<T, B>* const s[] = {state[at[J]]...};
        for (variable_state<T, B>* v : s)
          if (!v || !(v->value.shape() == g.shape())) return false;
        bool adding = true;
        for (variable_state<T, B>* v : s) adding = adding && (v->is_leaf() || v->has_pending);
        if (adding) {
          tensor<T, B>* const e[] = {&(s[J]->is_leaf() ? s[J]->grad : s[J]->pending)...};
          assign_each(std::tie(*e[J]...), (*e[J] + path_gradient<at[J]>(values, g))...);
          return true;
        }
        std::array<tensor<T, B>, m> added;
        std::array<tensor<T, B>*, m> d{};
        for (std::size_t j = 0; j < m; ++j) {
          tensor<T, B>& fresh = s[j]->is_leaf() || s[j]->has_pending ? added[j] : s[j]->pending;
          fresh = tensor<T, B>(g.shape(), uninitialized);
          s[j]->has_pending = s[j]->has_pending || !s[j]->is_leaf();
          d[j] = &fresh;
        }
        assign_each(std::tie(*d[J]...), path_gradient<at[J]>(values, g)...);
        for (std::size_t j = 0; j < m; ++j)
          if (d[j] == &added[j]) add_gradient(*s[j], std::move(added[j]));
        return true;
      }
      (std::make_index_sequence<m>{});
    }
  }

  static constexpr std::size_t reached_count() {
    return []<std::size_t... K>(std::index_sequence<K...>) {
      return (std::size_t{reached<K>()} + ... + 0);
    }
    (std::make_index_sequence<leaves>{});
  }

  // The paths of leaves K + I... that the mask selects, a loop each.
  template <std::size_t K, class V, class G, std::size_t... I>
  static void each_path(const V& values, const G& g, variable_state<T, B>& s,
                        const std::array<T, leaves>& mask, std::index_sequence<I...>) {
    auto one = [&]<std::size_t J>(std::integral_constant<std::size_t, J>) {
      if constexpr (reached<J>())
        if (mask[J] != T(0)) accumulate(s, path_gradient<J>(values, g));
    };
    (one(std::integral_constant<std::size_t, K + I>{}), ...);
  }

  template <std::size_t J, class V, class G>
  static auto masked_sum(const V& values, const G& g, const std::array<T, leaves>& mask) {
    if constexpr (J == leaves) {
      return no_gradient{};
    } else {
      auto rest = masked_sum<J + 1>(values, g, mask);
      if constexpr (!reached<J>()) {
        return rest;
      } else {
        auto term = where(scalar_expr<T>(mask[J]), path_gradient<J>(values, g), T(0));
        if constexpr (std::is_same_v<decltype(rest), no_gradient>)
          return term;
        else
          return term + rest;
      }
    }
  }

  void release_saved() override { tree_.reset(); }

  std::optional<Tree> tree_;
};

template <class T, class B, class E>
state_ptr<T, B> record_fused(const E& e) {
  static_assert(only_map_nodes_over_variables<E>::value,
                "meld::autograd: a reduction or matrix product of variables inside an expression: "
                "call autograd's sum / mean / max / min / matmul (unqualified, or "
                "meld::autograd::...), which return variables");
  auto s = std::make_shared<variable_state<T, B>>();
  s->value = tensor<T, B>(transform_leaves(e, value_leaf{}));
  bool needs = false;
  if (is_grad_enabled())
    for_each_leaf(e, [&](const auto& leaf) {
      if constexpr (is_variable<std::remove_cvref_t<decltype(leaf)>>)
        needs = needs || leaf.requires_grad();
    });
  if (needs) {
    // The node keeps the tree: variables are shared handles, tensors views of their storage.
    s->grad_fn = std::make_shared<fused_node<T, B, E>>(e);
    s->requires_grad = true;
  }
  return s;
}

}  // namespace detail

/// @}

}  // namespace meld::autograd

// How the CPU evaluator lowers an expression (the walk itself is expr/walk.hpp's lower()): each
// input of the fused kernel becomes a cursor (cursor.hpp), and the map nodes above them stay as
// they are. The row kernels copy the whole tree into locals, so that after inlining the inner loop
// works on registers only (no reloads through the expression tree, which is what makes xtensor's
// loops slow).
#pragma once

#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>

#include "../../core/gcc12_warnings.hpp"
#include "../../expr/walk.hpp"
#include "../../tensor/tensor.hpp"
#include "../lowering.hpp"
#include "cursor.hpp"

MELD_GCC12_WARNINGS_OFF

namespace meld::detail::cpu_eval {

// Evaluated on their own, into a temporary that the kernel then reads (defined with the
// evaluations: reduce_axis.hpp and matmul.hpp).
template <class R, class A>
tensor<typename reduce_expr<R, A>::value_type, cpu<>> materialize(const reduce_expr<R, A>& e);
template <class A, class B>
tensor<typename matmul_expr<A, B>::value_type, cpu<>> materialize(const matmul_expr<A, B>& e);

// Makes the cursor of each input, recording the layouts of strided ones in `table`.
template <class Table>
struct make_input {
  Table& table;
  template <class E>
  auto operator()(const E& e) const {
    if constexpr (strided_leaf<E>) {
      table.add(e);
      return leaf_cursor<value_t<E>>{};
    } else if constexpr (is_scalar_expr<E>) {
      return scalar_cursor<value_t<E>>{e.value()};
    } else {
      auto t = materialize(e);
      const auto* data = t.raw_data();
      const shape_t shape = t.shape();
      const strides_t strides = t.strides();
      table.add(data, shape, strides, std::move(t).release().storage_ptr());
      return leaf_cursor<value_t<E>>{};
    }
  }
};

// A leaf table that records nothing, for the flat path (which has no inputs to materialize).
struct no_table {
  template <class... Args>
  void add(const Args&...) {}
};

template <class C>
struct reads_row : std::bool_constant<C::leaf_count == 1> {};

// The kernel's view of a lowered tree, for one row at a time.
template <class Tree>
struct cursor {
  using value_type = value_t<Tree>;
  static constexpr int leaf_count = count_inputs<reads_row, Tree>::value;  // row pointers taken

  Tree tree;

  MELD_INLINE void set_rows(char* const* rows, int& k) {
    for_each_input(tree, [&](auto& input) { input.set_rows(rows, k); });
  }
  MELD_INLINE value_type get(index_t j) const { return evaluate(tree, get_at{j}); }
  template <class Batch>
  MELD_INLINE auto load(index_t j) const {
    return evaluate(tree, load_at<Batch>{j});
  }
  template <class Batch>
  MELD_INLINE auto load_tail(index_t j, index_t n) const {
    return evaluate(tree, load_tail_at<Batch>{j, n});
  }

 private:
  struct get_at {
    index_t j;
    template <class C>
    MELD_INLINE auto operator()(const C& c) const {
      return c.get(j);
    }
  };
  template <class Batch>
  struct load_at {
    index_t j;
    template <class C>
    MELD_INLINE auto operator()(const C& c) const {
      return c.template load<Batch>(j);
    }
  };
  template <class Batch>
  struct load_tail_at {
    index_t j, n;
    template <class C>
    MELD_INLINE auto operator()(const C& c) const {
      return c.template load_tail<Batch>(j, n);
    }
  };
};

template <class E, class Table>
auto make_cursor(const E& e, Table& table) {
  auto tree = lower(e, make_input<Table>{table});
  return cursor<decltype(tree)>{tree};
}

template <class E>
using cursor_t = decltype(make_cursor(std::declval<const E&>(), std::declval<no_table&>()));

// When every input is a strided leaf contiguous with exactly `shape` (or a scalar): records the
// leaves' data pointers and element sizes from ptrs[k] on and returns true. The flat fast path
// then reads them in place, skipping the planner (small tensors pay almost no overhead).
template <class E>
MELD_INLINE bool flat_inputs(const E& e, const shape_t& shape, char** ptrs, std::size_t* elems,
                             int& k) {
  bool flat = true;
  for_each_input(e, [&](const auto& input) {
    using I = std::remove_cvref_t<decltype(input)>;
    if constexpr (strided_leaf<I>) {
      if (!flat || !(input.shape() == shape) || !input.is_contiguous()) {
        flat = false;
        return;
      }
      elems[k] = sizeof(value_t<I>);
      ptrs[k++] = const_cast<char*>(reinterpret_cast<const char*>(input.raw_data()));
    } else if constexpr (!is_scalar_expr<I>) {
      flat = false;  // evaluated on its own first
    }
  });
  return flat;
}

}  // namespace meld::detail::cpu_eval

MELD_GCC12_WARNINGS_ON
